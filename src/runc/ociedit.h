/* SPDX-License-Identifier: MIT */
/*
 * ociedit.h: what accel-runc does to a container's OCI config before runc
 * sees it: find the app the container names, find that app's CDI device
 * (kind accel.dev/app, the spec acceld writes for people's own
 * containers, docs/containers.md) and apply its containerEdits (env,
 * mounts, device nodes, hooks) as a CDI-aware engine would. No runc here
 * and no acceld: the files only.
 */
#ifndef ACCEL_RUNC_OCIEDIT_H
#define ACCEL_RUNC_OCIEDIT_H

#include <jansson.h>
#include <stdbool.h>

#define OCIEDIT_KIND       "accel.dev/app" /* the CDI kind of apps */
#define OCIEDIT_ENV        "ACCEL_APP"     /* the app, in process.env */
#define OCIEDIT_ANNOTATION "accel.dev/app" /* or as an annotation */
#define OCIEDIT_ENGINE_ANNOTATION "accel.dev/engine" /* set: the engine */

/*
 * The app a container's config names: its annotation accel.dev/app, else
 * ACCEL_APP=NAME in process.env; NULL when it names none. The string
 * belongs to config.
 */
const char *ociedit_app(const json_t *config);

/*
 * The containerEdits of device name of kind accel.dev/app in the first
 * spec that lists it, in dirs (NULL-terminated; each spec file *.json,
 * *.yaml or *.yml): a new reference, or NULL when no spec lists it.
 */
json_t *ociedit_find(const char *const *dirs, const char *name);

/*
 * edits (CDI containerEdits) applied to config in place: each env entry
 * replaces the variable of that name or is added; mounts and hooks are
 * added; each device node is added with its type and numbers from the
 * host's node (hostPath, else path) and allowed in the device cgroup.
 * false with *cause (caller frees) when a device node cannot be read;
 * config is then partly edited and must not be used.
 */
bool ociedit_apply(json_t *config, const json_t *edits, char **cause);

#endif
