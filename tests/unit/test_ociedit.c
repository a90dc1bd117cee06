/* SPDX-License-Identifier: MIT */
/*
 * test_ociedit.c: accel-runc's edits of an OCI config (src/runc/ociedit.c):
 * the app a container names (annotation over ACCEL_APP), the app's device
 * found among CDI specs of other kinds and in YAML, and a CDI device's
 * env (replacing), mounts, device nodes (type and numbers from the host's
 * node, allowed in the device cgroup) and hooks applied.
 */
#include "common/accel_setup.h"
#include "runc/ociedit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "harness.h"

static json_t *config(const char *text)
{
    json_error_t e;
    json_t *c = json_loads(text, 0, &e);
    if (c == NULL)
        FAIL_AT_("bad test JSON: %s", e.text);
    return c;
}

TEST(ociedit_app_named)
{
    json_t *c = config("{\"process\": {\"env\": [\"PATH=/bin\", "
                       "\"ACCEL_APP=ollama\"]}}");
    ASSERT_STR_EQ(ociedit_app(c), "ollama");
    json_object_set_new(c, "annotations",
                        json_pack("{s:s}", "accel.dev/app", "other"));
    ASSERT_STR_EQ(ociedit_app(c), "other"); /* the annotation wins */
    json_decref(c);
    c = config("{\"process\": {\"env\": [\"ACCEL_APP=\", \"ACCEL_APPX=y\"]}}");
    ASSERT(ociedit_app(c) == NULL);
    json_decref(c);
    c = config("{}");
    ASSERT(ociedit_app(c) == NULL);
    json_decref(c);
}

static void put(const char *dir, const char *name, const char *text)
{
    char *path = xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
    free(path);
}

TEST(ociedit_find_among_specs)
{
    const char *dir = harness_tmp(), *dirs[] = {"/nonexistent", dir, NULL};
    json_t *e;

    put(dir, "nvidia.json", "{\"cdiVersion\": \"0.5.0\", \"kind\": "
        "\"nvidia.com/gpu\", \"devices\": [{\"name\": \"ollama\", "
        "\"containerEdits\": {\"env\": [\"WRONG=1\"]}}]}");
    put(dir, "notes.txt", "not a spec");
    put(dir, "accel-x-a.yaml", "cdiVersion: 0.5.0\nkind: accel.dev/app\n"
        "devices:\n- name: ollama\n  containerEdits:\n"
        "    env: [ACCEL_APP=ollama]\n");
    e = ociedit_find(dirs, "ollama");
    ASSERT(e != NULL);
    ASSERT_STR_EQ(json_string_value(json_array_get(
                      json_object_get(e, "env"), 0)), "ACCEL_APP=ollama");
    json_decref(e);
    ASSERT(ociedit_find(dirs, "nosuch") == NULL);
}

TEST(ociedit_apply_edits)
{
    json_t *c = config("{\"process\": {\"env\": [\"PATH=/bin\", "
                       "\"LD_PRELOAD=/own.so\"]}, \"mounts\": [], "
                       "\"linux\": {}}");
    json_t *edits = config(
        "{\"env\": [\"LD_PRELOAD=/usr/lib/accel/libaccelshim.so\", "
        "\"ACCEL_APP=a\"], \"mounts\": [{\"hostPath\": \"/h/shim.so\", "
        "\"containerPath\": \"/usr/lib/accel/libaccelshim.so\", "
        "\"options\": [\"ro\", \"bind\"]}], \"deviceNodes\": [{\"path\": "
        "\"/dev/accel-null\", \"hostPath\": \"/dev/null\"}], \"hooks\": "
        "[{\"hookName\": \"createContainer\", \"path\": \"/usr/bin/accelctl\","
        " \"args\": [\"accelctl\", \"cdi-hook\", \"/cg\"]}]}");
    char *cause = NULL, *text;

    ASSERT(ociedit_apply(c, edits, &cause));
    text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STR_EQ(text,
        "{\"hooks\":{\"createContainer\":[{\"args\":[\"accelctl\","
        "\"cdi-hook\",\"/cg\"],\"path\":\"/usr/bin/accelctl\"}]},"
        "\"linux\":{\"devices\":[{\"fileMode\":438,\"gid\":0,\"major\":1,"
        "\"minor\":3,\"path\":\"/dev/accel-null\",\"type\":\"c\",\"uid\":0}],"
        "\"resources\":{\"devices\":[{\"access\":\"rwm\",\"allow\":true,"
        "\"major\":1,\"minor\":3,\"type\":\"c\"}]}},"
        "\"mounts\":[{\"destination\":\"/usr/lib/accel/libaccelshim.so\","
        "\"options\":[\"ro\",\"bind\"],\"source\":\"/h/shim.so\","
        "\"type\":\"bind\"}],"
        "\"process\":{\"env\":[\"PATH=/bin\","
        "\"LD_PRELOAD=/usr/lib/accel/libaccelshim.so\",\"ACCEL_APP=a\"]}}");
    free(text);
    json_decref(c);
    json_decref(edits);
}

TEST(ociedit_missing_node_refused)
{
    json_t *c = config("{}");
    json_t *edits = config("{\"deviceNodes\": [{\"path\": \"/dev/nvidia9\", "
                           "\"hostPath\": \"/nonexistent/nvidia9\"}]}");
    char *cause = NULL;

    ASSERT(!ociedit_apply(c, edits, &cause));
    ASSERT(cause != NULL && strstr(cause, "/nonexistent/nvidia9") != NULL);
    free(cause);
    json_decref(c);
    json_decref(edits);
}

#define LIST(XX)                   \
    XX(ociedit_app_named)          \
    XX(ociedit_find_among_specs)   \
    XX(ociedit_apply_edits)        \
    XX(ociedit_missing_node_refused)
TEST_MAIN(LIST)
