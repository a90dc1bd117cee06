/* SPDX-License-Identifier: MIT */
/*
 * inventory.h: the --inventory file of SPEC 8.1 (JSON or YAML): nodes with
 * declared capacity and usage and their devices. Pure parsing.
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_INVENTORY_H
#define ACCEL_DAEMON_NODE_DEVICES_INVENTORY_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "accel/accel.h"

struct inv_device {
    char *id;                /* device id */
    enum accel_type type;    /* accelerator type */
    char *model;             /* model name or NULL */
    uint64_t memory;         /* bytes; 0 = 75 % of node RAM (unified) */
    bool has_support;        /* supportType given */
    enum accel_support st;   /* initial mode */
    bool healthy;            /* health "yes" (default) */
    int index;               /* index, -1 if none */
};

struct inv_node {
    char *name;
    uint64_t mem_total, mem_used;   /* bytes */
    uint64_t cpu_total, cpu_used;   /* millicores */
    uint64_t disk_total, disk_used; /* bytes */
    struct inv_device *devs;
    size_t ndevs;
};

struct inventory {
    struct inv_node *nodes;
    size_t nnodes;
};

/* Read and validate FILE. On failure *cause names the field and the rule. */
enum accel_err inventory_load(const char *path, struct inventory *out,
                              char **cause);
/* Same from a buffer (for tests and fuzzing). */
enum accel_err inventory_parse(const char *buf, size_t len,
                               struct inventory *out, char **cause);
void inventory_release(struct inventory *inv);

#endif /* ACCEL_DAEMON_NODE_DEVICES_INVENTORY_H */
