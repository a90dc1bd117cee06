/* SPDX-License-Identifier: MIT */
/*
 * names.c: prints the shim's symbol list (src/shim/symbols.h) as
 * "LIB HOOKED NAME" lines, so that run-all.sh probes every name the shim
 * hooks today, not a list copied by hand. Built with -I src.
 */
#include <stdio.h>

#include "shim/symbols.h"

#define PRINT_NAME(lib, hooked, ret, name, params)                             \
    printf("%s %d %s\n", #lib, hooked, #name);

int main(void)
{
    ACCEL_SHIM_SYMBOLS(PRINT_NAME)
    return 0;
}
