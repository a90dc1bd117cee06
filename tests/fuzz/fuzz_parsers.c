/* SPDX-License-Identifier: MIT */
/*
 * fuzz_parsers.c: libFuzzer target for the request and manifest parsers:
 * the bytes are read as JSON or YAML (yamljson_parse_any), then as a
 * manifest, an inventory and a computeBinding list. Any crash, leak or
 * sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common/yamljson.h"
#include "daemon/inventory.h"
#include "daemon/manifest.h"
#include "daemon/ops.h"

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
    return 0;
}
