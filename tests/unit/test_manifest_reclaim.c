/* SPDX-License-Identifier: MIT */
/*
 * test_manifest_reclaim.c: spec.accelerator[].reclaim and priority (SPEC
 * 4.4, src/daemon/rules/manifest_reclaim.c): each form parsed with the
 * preset's usual port, every refusal naming its field and rule, and who
 * may install which action (a member's reaches only its own app).
 */
#include "common/accel_setup.h"
#include "daemon/rules/manifest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "harness.h"

/* A manifest whose nvidia entry gets `extra` (JSON members, may be "")
 * and whose run is `run` (a JSON object, or NULL for none). */
static json_t *doc(const char *extra, const char *run)
{
    char buf[4096];
    json_error_t err;
    json_t *j;

    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"a1\"},\"spec\":{\"accelerator\":"
             "[{\"mode\":\"nvidia\",\"requiredGPUMemory\":\"4Gi\","
             "\"limitedGPUMemory\":\"4Gi\",\"requiredMemory\":\"1Gi\","
             "\"limitedMemory\":\"1Gi\",\"requiredCpu\":\"1\","
             "\"limitedCpu\":\"1\",\"requiredDisk\":\"1Gi\","
             "\"limitedDisk\":\"1Gi\"%s%s}]}%s%s}",
             extra[0] ? "," : "", extra, run ? ",\"run\":" : "",
             run ? run : "");
    j = json_loads(buf, 0, &err);
    if (j == NULL)
        fprintf(stderr, "bad test JSON: %s: %s\n", err.text, buf);
    return j;
}

#define CMD "{\"command\":[\"/bin/true\"]}"

/* Parse; the cause on failure ("" on success) in a static buffer. */
static const char *parse(const char *extra, const char *run,
                         struct manifest *m)
{
    static char out[512];
    json_t *j = doc(extra, run);
    char *cause = NULL;

    out[0] = '\0';
    if (manifest_parse(j, m, &cause) != ACCEL_OK) {
        snprintf(out, sizeof out, "%s", cause ? cause : "(no cause)");
        memset(m, 0, sizeof(*m));
    }
    free(cause);
    json_decref(j);
    return out;
}

TEST(reclaim_presets_and_ports)
{
    static const struct {
        const char *name;
        enum manifest_preset p;
        unsigned port;
    } want[] = {{"ollama", MANIFEST_PRESET_OLLAMA, 11434},
                {"vllm", MANIFEST_PRESET_VLLM, 8000},
                {"comfyui", MANIFEST_PRESET_COMFYUI, 8188},
                {"llama-server", MANIFEST_PRESET_LLAMA_SERVER, 8080}};
    struct manifest m;
    char extra[128];

    for (size_t i = 0; i < 4; i++) {
        snprintf(extra, sizeof extra, "\"reclaim\":\"%s\"", want[i].name);
        ASSERT_STR_EQ(parse(extra, CMD, &m), "");
        ASSERT(m.reclaim != NULL);
        ASSERT_EQ(m.reclaim[0].kind, MANIFEST_RECLAIM_PRESET);
        ASSERT_EQ(m.reclaim[0].preset, want[i].p);
        ASSERT_EQ(m.reclaim[0].port, want[i].port);
        ASSERT_EQ(m.reclaim[0].priority, 0);
        ASSERT(!m.reclaim[0].or_stop);
        ASSERT_STR_EQ(manifest_preset_name(want[i].p), want[i].name);
        ASSERT(manifest_reclaim_of(&m, ACCEL_TYPE_NVIDIA) == &m.reclaim[0]);
        ASSERT(manifest_reclaim_of(&m, ACCEL_TYPE_CPU) == NULL);
        manifest_release(&m);
    }
    ASSERT_STR_EQ(parse("\"reclaim\":{\"preset\":\"ollama\",\"port\":11500,"
                        "\"orStop\":true},\"priority\":-3", CMD, &m), "");
    ASSERT_EQ(m.reclaim[0].port, 11500);
    ASSERT(m.reclaim[0].or_stop);
    ASSERT_EQ(m.reclaim[0].priority, -3);
    {
        json_t *j = manifest_reclaim_json(&m.reclaim[0]);
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        ASSERT_STR_EQ(s, "{\"orStop\":true,\"port\":11500,\"preset\":"
                         "\"ollama\"}");
        free(s);
        json_decref(j);
    }
    manifest_release(&m);
    /* none: no table at all; priority alone makes one */
    ASSERT_STR_EQ(parse("", CMD, &m), "");
    ASSERT(m.reclaim == NULL);
    manifest_release(&m);
    ASSERT_STR_EQ(parse("\"priority\":5", CMD, &m), "");
    ASSERT(m.reclaim != NULL);
    ASSERT_EQ(m.reclaim[0].kind, MANIFEST_RECLAIM_NONE);
    ASSERT_EQ(m.reclaim[0].priority, 5);
    manifest_release(&m);
}

TEST(reclaim_http_and_signal)
{
    struct manifest m;

    ASSERT_STR_EQ(parse("\"reclaim\":{\"http\":{\"method\":\"POST\","
                        "\"port\":9000,\"path\":\"/unload?all=1\","
                        "\"body\":{\"a\":1}}}", CMD, &m), "");
    ASSERT_EQ(m.reclaim[0].kind, MANIFEST_RECLAIM_HTTP);
    ASSERT_STR_EQ(m.reclaim[0].method, "POST");
    ASSERT_EQ(m.reclaim[0].port, 9000);
    ASSERT_STR_EQ(m.reclaim[0].path, "/unload?all=1");
    ASSERT_STR_EQ(m.reclaim[0].body, "{\"a\":1}");
    manifest_release(&m);
    /* method defaults to POST, a string body goes as it is */
    ASSERT_STR_EQ(parse("\"reclaim\":{\"http\":{\"port\":9000,\"path\":"
                        "\"/x\",\"body\":\"free\"}}", CMD, &m), "");
    ASSERT_STR_EQ(m.reclaim[0].method, "POST");
    ASSERT_STR_EQ(m.reclaim[0].body, "free");
    manifest_release(&m);
    ASSERT_STR_EQ(parse("\"reclaim\":{\"signal\":\"SIGUSR1\"}", CMD, &m), "");
    ASSERT_EQ(m.reclaim[0].kind, MANIFEST_RECLAIM_SIGNAL);
    ASSERT_EQ(m.reclaim[0].signal, SIGUSR1);
    manifest_release(&m);
    ASSERT_STR_EQ(parse("\"reclaim\":{\"signal\":\"USR2\"}", CMD, &m), "");
    ASSERT_EQ(m.reclaim[0].signal, SIGUSR2);
    manifest_release(&m);
}

TEST(reclaim_refusals_name_the_field)
{
    static const struct {
        const char *extra, *starts;
    } bad[] = {
        {"\"reclaim\":\"ollam\"", "spec.accelerator[0].reclaim must be one"},
        {"\"reclaim\":5", "spec.accelerator[0].reclaim must be a preset"},
        {"\"reclaim\":{}", "spec.accelerator[0].reclaim must say one way"},
        {"\"reclaim\":{\"preset\":\"vllm\",\"signal\":\"SIGUSR1\"}",
         "spec.accelerator[0].reclaim must say one way"},
        {"\"reclaim\":{\"preset\":\"vllm\",\"port\":0}",
         "spec.accelerator[0].reclaim.port must be a port"},
        {"\"reclaim\":{\"preset\":\"vllm\",\"port\":65536}",
         "spec.accelerator[0].reclaim.port must be a port"},
        {"\"reclaim\":{\"preset\":\"vllm\",\"host\":\"10.0.0.1\"}",
         "spec.accelerator[0].reclaim.host is not a known field"},
        {"\"reclaim\":{\"preset\":\"vllm\",\"orStop\":\"yes\"}",
         "spec.accelerator[0].reclaim.orStop must be"},
        {"\"reclaim\":{\"signal\":\"SIGKILL\"}",
         "spec.accelerator[0].reclaim.signal must be"},
        {"\"reclaim\":{\"signal\":\"SIGTERM\"}",
         "spec.accelerator[0].reclaim.signal must be"},
        {"\"reclaim\":{\"signal\":\"SIGUSR1\",\"port\":1}",
         "spec.accelerator[0].reclaim.port goes with preset"},
        {"\"reclaim\":{\"http\":{\"port\":9000}}",
         "spec.accelerator[0].reclaim.http.path must be"},
        {"\"reclaim\":{\"http\":{\"port\":9000,\"path\":\"free\"}}",
         "spec.accelerator[0].reclaim.http.path must be"},
        {"\"reclaim\":{\"http\":{\"port\":9000,\"path\":\"/a b\"}}",
         "spec.accelerator[0].reclaim.http.path must be"},
        {"\"reclaim\":{\"http\":{\"path\":\"/x\"}}",
         "spec.accelerator[0].reclaim.http.port must be"},
        {"\"reclaim\":{\"http\":{\"port\":9000,\"path\":\"/x\","
         "\"method\":\"PATCH\"}}",
         "spec.accelerator[0].reclaim.http.method must be"},
        {"\"reclaim\":{\"http\":{\"port\":9000,\"path\":\"/x\","
         "\"host\":\"example.com\"}}",
         "spec.accelerator[0].reclaim.http.host is not a known field"},
        {"\"reclaim\":{\"http\":{\"port\":9000,\"path\":\"/x\","
         "\"body\":5}}",
         "spec.accelerator[0].reclaim.http.body must be"},
        {"\"priority\":\"high\"", "spec.accelerator[0].priority must be"},
        {"\"priority\":1.5", "spec.accelerator[0].priority must be"},
        {"\"priority\":2000000", "spec.accelerator[0].priority must be"},
    };
    struct manifest m;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *c = parse(bad[i].extra, CMD, &m);
        if (strncmp(c, bad[i].starts, strlen(bad[i].starts)) != 0) {
            fprintf(stderr, "case %zu (%s): got \"%s\"\n", i, bad[i].extra,
                    c);
            ASSERT(0);
        }
    }
}

TEST(reclaim_who_may_install)
{
    struct manifest m;
    char *cause = NULL;

    /* an external app (no run) has nothing to answer an HTTP action */
    ASSERT_STR_EQ(parse("\"reclaim\":\"ollama\"", NULL, &m), "");
    ASSERT_EQ(manifest_check_install(&m, true, "/h", &cause), ACCEL_EINVAL);
    ASSERT(strstr(cause, "external") != NULL);
    free(cause);
    cause = NULL;
    manifest_release(&m);
    /* a member's app may rank lower than the default, not higher; an
     * admin's any */
    ASSERT_STR_EQ(parse("\"reclaim\":{\"signal\":\"SIGUSR1\"},"
                        "\"priority\":5", CMD, &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause),
              ACCEL_EFORBIDDEN);
    ASSERT(strncmp(cause, "spec.accelerator[0].priority: a member's app may "
                   "not rank above the default 0 (got 5)", 80) == 0);
    free(cause);
    cause = NULL;
    ASSERT_EQ(manifest_check_install(&m, true, "/h", &cause), ACCEL_OK);
    manifest_release(&m);
    ASSERT_STR_EQ(parse("\"reclaim\":{\"signal\":\"SIGUSR1\"},"
                        "\"priority\":-3", CMD, &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause), ACCEL_OK);
    manifest_release(&m);
    /* a signal needs no port */
    ASSERT_STR_EQ(parse("\"reclaim\":{\"signal\":\"SIGUSR1\"}", CMD, &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause), ACCEL_OK);
    manifest_release(&m);
    /* a member's host command: ports from 1024 up */
    ASSERT_STR_EQ(parse("\"reclaim\":{\"http\":{\"port\":80,\"path\":\"/x\"}}",
                        CMD, &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause),
              ACCEL_EFORBIDDEN);
    ASSERT(strncmp(cause, "spec.accelerator[0].reclaim: a member's action "
                   "may reach only its own app", 70) == 0);
    free(cause);
    cause = NULL;
    ASSERT_EQ(manifest_check_install(&m, true, "/h", &cause), ACCEL_OK);
    manifest_release(&m);
    /* a member's container: one of the ports it publishes */
    ASSERT_STR_EQ(parse("\"reclaim\":\"comfyui\"",
                        "{\"image\":\"comfy/ui:1\",\"ports\":"
                        "[\"127.0.0.1:8188:8188\"]}", &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause), ACCEL_OK);
    manifest_release(&m);
    ASSERT_STR_EQ(parse("\"reclaim\":\"ollama\"",
                        "{\"image\":\"comfy/ui:1\",\"ports\":"
                        "[\"127.0.0.1:8188:8188\"]}", &m), "");
    ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause),
              ACCEL_EFORBIDDEN);
    ASSERT(strstr(cause, "port 11434 is not one its container publishes"));
    free(cause);
    manifest_release(&m);
    /* published where acceld's call to 127.0.0.1 does not land ([::1], or
     * UDP): the call would reach whoever else listens on 127.0.0.1:8188 */
    {
        static const char *const elsewhere[] = {
            "[\"[::1]:8188:8188\"]", "[\"127.0.0.1:8188:8188/udp\"]"};
        for (size_t i = 0; i < 2; i++) {
            char *run = xasprintf(
                "{\"image\":\"comfy/ui:1\",\"ports\":%s}", elsewhere[i]);
            ASSERT_STR_EQ(parse("\"reclaim\":\"comfyui\"", run, &m), "");
            cause = NULL;
            ASSERT_EQ(manifest_check_install(&m, false, "/h", &cause),
                      ACCEL_EFORBIDDEN);
            ASSERT(strstr(cause, "port 8188 is not one its container "
                                 "publishes on 127.0.0.1 over TCP"));
            free(cause);
            free(run);
            manifest_release(&m);
        }
    }
    ASSERT(manifest_port_reached("127.0.0.1:8188:80/tcp", 8188));
    ASSERT(manifest_port_reached("0.0.0.0:8188:80/tcp", 8188));
    ASSERT(!manifest_port_reached("[::1]:8188:80/tcp", 8188));
    ASSERT(!manifest_port_reached("127.0.0.1:8188:80/udp", 8188));
    ASSERT(!manifest_port_reached("127.0.0.1:18188:80/tcp", 8188));
    ASSERT(!manifest_port_reached("127.0.0.2:8188:80/tcp", 8188));
}

/* Issue 46 on AMD: an amd (APU) entry may say how it gives memory back
 * (its carve-out and GTT, which acceld reads from the amdgpu sysfs); a
 * cpu entry has no GPU memory to give back: refused, naming the field. */
TEST(reclaim_on_the_amd_apu)
{
    static const char *const fmt =
        "{\"metadata\":{\"name\":\"a1\"},\"spec\":{\"accelerator\":"
        "[{\"mode\":\"%s\",\"requiredMemory\":\"1Gi\","
        "\"limitedMemory\":\"1Gi\",\"requiredCpu\":\"1\","
        "\"limitedCpu\":\"1\",\"requiredDisk\":\"1Gi\","
        "\"limitedDisk\":\"1Gi\",\"reclaim\":\"ollama\"}]},"
        "\"run\":" CMD "}";
    char buf[1024];
    struct manifest m;
    char *cause = NULL;
    json_t *j;

    snprintf(buf, sizeof buf, fmt, "amd");
    j = json_loads(buf, 0, NULL);
    ASSERT(j != NULL);
    ASSERT_EQ(manifest_parse(j, &m, &cause), ACCEL_OK);
    ASSERT(m.reclaim != NULL);
    ASSERT_EQ(m.reclaim[0].preset, MANIFEST_PRESET_OLLAMA);
    manifest_release(&m);
    json_decref(j);
    snprintf(buf, sizeof buf, fmt, "cpu");
    j = json_loads(buf, 0, NULL);
    ASSERT(j != NULL);
    ASSERT_EQ(manifest_parse(j, &m, &cause), ACCEL_EINVAL);
    ASSERT(cause != NULL &&
           strstr(cause, "spec.accelerator[0].reclaim is for a GPU") != NULL &&
           strstr(cause, "mode=cpu has none to give back") != NULL);
    free(cause);
    json_decref(j);
}

#define TESTS(XX)                                                              \
    XX(reclaim_on_the_amd_apu)                                                 \
    XX(reclaim_presets_and_ports)                                              \
    XX(reclaim_http_and_signal)                                                \
    XX(reclaim_refusals_name_the_field)                                        \
    XX(reclaim_who_may_install)

TEST_MAIN(TESTS)
