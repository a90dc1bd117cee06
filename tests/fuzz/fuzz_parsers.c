/* SPDX-License-Identifier: MIT */
/*
 * fuzz_parsers.c: libFuzzer target for the request and manifest parsers:
 * the bytes are read as JSON or YAML (yamljson_parse_any), then as a
 * manifest, an inventory and a computeBinding list, and as a PromQL query
 * (parsed, then evaluated over two fixed series). Any crash, leak or
 * sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/yamljson.h"
#include "daemon/api/ops.h"
#include "daemon/api/promql.h"
#include "daemon/node/devices/inventory.h"
#include "daemon/rules/manifest.h"

static bool fetch(void *ctx, const char *metric, int64_t t,
                  struct promql_value *out)
{
    const char *a[] = {"deviceuuid", "GPU-a", "instance", "n1"};
    const char *b[] = {"deviceuuid", "GPU-b", "instance", "n1"};
    (void)ctx;
    (void)t;
    (void)metric;
    promql_add(out, a, 2, 1.5);
    promql_add(out, b, 2, 0);
    return metric[0] != 'x';
}

/* The bytes as a PromQL query (NUL-terminated copy). */
static void fuzz_promql(const uint8_t *data, size_t size)
{
    char *q = malloc(size + 1);
    struct promql_query *pq = NULL;
    struct promql_value v = {0};
    char *cause = NULL;
    memcpy(q, data, size);
    q[size] = '\0';
    if (promql_parse(q, &pq, &cause) == ACCEL_OK) {
        promql_eval(pq, 1000, fetch, NULL, &v, &cause);
        promql_value_release(&v);
        promql_free(pq);
    }
    free(cause);
    free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *v = NULL;
    char *cause = NULL;
    struct manifest m;
    struct inventory inv;
    struct op_binding b;
    struct op_result res = {0};

    if (yamljson_parse_any((const char *)data, size, &v, &cause) == ACCEL_OK) {
        if (manifest_parse(v, &m, &cause) == ACCEL_OK)
            manifest_release(&m);
        free(cause);
        cause = NULL;
        if (ops_parse_binding(json_object_get(v, "computeBinding"),
                              "computeBinding", &b, &res))
            ops_binding_release(&b);
        op_result_release(&res);
        json_decref(v);
    }
    free(cause);
    cause = NULL;
    if (inventory_parse((const char *)data, size, &inv, &cause) == ACCEL_OK)
        inventory_release(&inv);
    free(cause);
    fuzz_promql(data, size);
    return 0;
}
