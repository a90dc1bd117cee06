/* SPDX-License-Identifier: MIT */
/* main.c: acceld's entry point; everything happens in daemon_main. */
#include "daemon/daemon.h"

int main(int argc, char **argv)
{
    return daemon_main(argc, argv);
}
