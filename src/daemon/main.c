/* SPDX-License-Identifier: MIT */
/* main.c: acceld's entry point (placeholder until the daemon lands). */
#include <stdio.h>

int main(void)
{
    fputs("acceld: not yet\n", stderr);
    return 1;
}
