/* SPDX-License-Identifier: MIT */
/*
 * test_yamljson.c: the YAML/JSON reader of manifests and inventories
 * (src/common/yamljson.c) refuses what would silently change a value: a
 * duplicate key (the last one used to win) and a NUL inside a key or a
 * string (it used to cut a name short), each with the path of the field;
 * and JSON's \u0000 (jansson's JSON_ALLOW_NUL stays off).
 */
#include "common/accel_setup.h"
#include "common/yamljson.h"

#include "harness.h"

/* Parsing text must fail with a cause containing want. */
static void expect_refused(const char *text, size_t len, const char *want)
{
    json_t *v = NULL;
    char *cause = NULL;
    enum accel_err err = yamljson_parse_any(text, len, &v, &cause);
    if (err == ACCEL_OK)
        FAIL_AT_("accepted: %s", json_dumps(v, JSON_COMPACT));
    ASSERT_EQ(err, ACCEL_EPARSE);
    ASSERT(v == NULL);
    ASSERT(cause != NULL);
    if (strstr(cause, want) == NULL)
        FAIL_AT_("cause \"%s\" lacks \"%s\"", cause, want);
    free(cause);
}

#define REFUSED(lit, want) expect_refused(lit, sizeof(lit) - 1, want)

TEST(yamljson_duplicate_keys_refused_with_path)
{
    REFUSED("a: 1\na: 2\n", "line 2: a: duplicate key");
    REFUSED("spec:\n  accelerator:\n  - mode: nvidia\n    requiredMemory: "
            "1Gi\n    mode: cpu\n",
            "line 5: spec.accelerator[0].mode: duplicate key");
    REFUSED("spec:\n  accelerator:\n  - {mode: cpu}\n  - {mode: nvidia, "
            "mode: amd}\n",
            "spec.accelerator[1].mode: duplicate key");
    REFUSED("metadata: {name: a}\nmetadata: {name: b}\n",
            "line 2: metadata: duplicate key");
    REFUSED("run:\n  env:\n    PORT: '1'\n    PORT: '2'\n",
            "run.env.PORT: duplicate key");
    REFUSED("nodes:\n- name: a\n  devices:\n  - id: x\n    memory: 1Gi\n"
            "    memory: 2Gi\n",
            "nodes[0].devices[0].memory: duplicate key");
    /* JSON too */
    REFUSED("{\"a\": 1, \"a\": 2}", "duplicate");
}

TEST(yamljson_nul_refused_with_path)
{
    /* a double-quoted "\0" escape is a real NUL byte in the scalar */
    REFUSED("metadata: {name: \"web\\0evil\"}\n",
            "line 1: metadata.name: a string contains a NUL character");
    REFUSED("spec:\n  accelerator:\n  - mode: \"nvidia\\0\"\n",
            "spec.accelerator[0].mode: a string contains a NUL character");
    REFUSED("run:\n  command: [\"a\", \"b\\0c\"]\n",
            "run.command[1]: a string contains a NUL character");
    REFUSED("metadata: {\"na\\0me\": x}\n",
            "metadata.na: a key contains a NUL character");
    /* a raw NUL byte in the text */
    expect_refused("a: x\0y\n", 7, "line 1");
    /* JSON: \u0000 is refused by jansson (JSON_ALLOW_NUL is off) */
    REFUSED("{\"metadata\": {\"name\": \"web\\u0000evil\"}}", "\\u0000");
}

TEST(yamljson_still_reads_documents)
{
    json_t *v = NULL;
    char *cause = NULL;
    static const char doc[] =
        "metadata: {name: web}\nspec:\n  accelerator:\n  - mode: nvidia\n"
        "    requiredGPUMemory: 8Gi\n  - mode: cpu\nlist: [1, 2.5, true, "
        "~, \"s\"]\n";
    ASSERT_EQ(yamljson_parse(doc, sizeof doc - 1, &v, &cause), ACCEL_OK);
    ASSERT(cause == NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(
                      json_object_get(v, "metadata"), "name")),
                  "web");
    ASSERT_EQ(json_array_size(json_object_get(json_object_get(v, "spec"),
                                              "accelerator")),
              2);
    ASSERT(json_is_null(json_array_get(json_object_get(v, "list"), 3)));
    json_decref(v);
    /* the same key in two different mappings is fine */
    ASSERT_EQ(yamljson_parse("a: {k: 1}\nb: {k: 2}\n", 20, &v, &cause),
              ACCEL_OK);
    json_decref(v);
}

/* A syntax error after valid events used to return the last event's
 * ACCEL_OK with *out unset and the cause allocated (the fuzzer's leak,
 * and an uninitialised tree for the callers). */
TEST(yamljson_syntax_error_after_valid_events)
{
    REFUSED("a: 1\nb: {c: d:\n  - e\n", "line ");
    REFUSED("apiVersion: v2\nmetadatametadata: {name: duptor:\n  - mode: "
            "nvidia\n    mode: cpu\n",
            "line ");
    REFUSED("k: v\n- x\n", "line 2");
}

#define LIST(XX)                                                               \
    XX(yamljson_duplicate_keys_refused_with_path)                              \
    XX(yamljson_syntax_error_after_valid_events)                               \
    XX(yamljson_nul_refused_with_path)                                         \
    XX(yamljson_still_reads_documents)
TEST_MAIN(LIST)
