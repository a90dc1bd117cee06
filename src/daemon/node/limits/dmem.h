/* SPDX-License-Identifier: MIT */
/*
 * dmem.h: the kernel's device-memory cgroup controller (Linux 6.14, SPEC 4).
 * A GPU driver registers its memory as a region, listed with its size in
 * <cgroup root>/dmem.capacity ("drm/0000:03:00.0/vram0 17179869184",
 * "nvidia/0000:01:00.0/vidmem ..."); every cgroup below the root then has
 * dmem.max, dmem.min, dmem.low and dmem.current, one "region value" line
 * each, and an allocation past an ancestor's dmem.max fails in the kernel
 * whatever API made it.
 *
 * This module reads and writes those files under a cgroup root that tests
 * replace with a fixture tree (acceld --cgroup-root). It knows nothing of
 * apps or devices: node/vram.c decides which region holds which quota.
 * A malformed file is an error with a sentence naming the line, never a
 * crash; a write the kernel refuses is an error with its errno's sentence.
 *
 * Thread-safety: no state; every call reads or writes the files afresh.
 */
#ifndef ACCEL_DAEMON_NODE_LIMITS_DMEM_H
#define ACCEL_DAEMON_NODE_LIMITS_DMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

#define DMEM_REGION_LEN 128 /* a region's name, e.g. "drm/0000:03:00.0/vram0" */
#define DMEM_PCI_LEN 16     /* "0000:03:00.0" */

/* One line of dmem.capacity. */
struct dmem_region {
    char name[DMEM_REGION_LEN]; /* the region as the kernel names it */
    char pci[DMEM_PCI_LEN];     /* its PCI address, lower case; "" none */
    uint64_t capacity;          /* bytes */
};

/*
 * Parse the text of dmem.capacity.
 *   out    new array of *count regions (caller frees), NULL when none;
 *          set only on success.
 *   cause  on ACCEL_EPARSE, an allocated sentence naming the line.
 * A region's PCI address is the component of its name (between '/')
 * that reads dddd:bb:dd.f. Returns ACCEL_OK or ACCEL_EPARSE.
 */
enum accel_err dmem_parse_capacity(const char *text, struct dmem_region **out,
                                   size_t *count, char **cause);

/*
 * Read <root>/dmem.capacity. ACCEL_ENOTFOUND when the file is absent (a
 * kernel without the controller: nothing else here may be used),
 * ACCEL_EPARSE when it is malformed, each with *cause; else as
 * dmem_parse_capacity.
 */
enum accel_err dmem_read_capacity(const char *root, struct dmem_region **out,
                                  size_t *count, char **cause);

/* Normalize a PCI address ("00000000:03:00.0", "0000:03:00.0", upper or
 * lower case) into out as "dddd:bb:dd.f"; false when s is not one. */
bool dmem_pci_normalize(const char *s, char out[DMEM_PCI_LEN]);

/*
 * Hold the cgroup <root><rel> to limit bytes of region: enable dmem in
 * cgroup.subtree_control of <root> and of every ancestor of <rel> that
 * does not list it yet (from the root down), then write "region limit"
 * to <root><rel>/dmem.max and read it back. rel starts with '/'. A limit
 * of 0 writes "max" (no limit: Exclusive, Time slicing, a cleared
 * binding). Returns ACCEL_OK; ACCEL_ESYS with *cause when a write is
 * refused (the file, the value and the errno), when dmem.max is absent
 * after the controller was enabled, or when it reads back otherwise.
 */
enum accel_err dmem_set_max(const char *root, const char *rel,
                            const char *region, uint64_t limit, char **cause);

/*
 * The figure of region in <root><rel>/<file> ("dmem.max", "dmem.current"):
 * bytes, UINT64_MAX for "max". ACCEL_ENOTFOUND (no file, or no line for
 * the region), ACCEL_EPARSE (not a number); *out set only on success.
 */
enum accel_err dmem_read(const char *root, const char *rel, const char *file,
                         const char *region, uint64_t *out);

#endif /* ACCEL_DAEMON_NODE_LIMITS_DMEM_H */
