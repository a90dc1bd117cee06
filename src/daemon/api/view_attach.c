/* SPDX-License-Identifier: MIT */
/*
 * view_attach.c: the lines people use to attach their own containers to
 * an external app (view_attach.h). The forms are those checked with the
 * tools Debian 12 ships (tests/integration/test_containers.py and
 * test_docker.py); Docker 25's CDI and Compose v2 as their docs give them.
 */
#include "common/accel_setup.h"
#include "daemon/api/view_attach.h"

#include <stdarg.h>
#include <stdlib.h>

#include "common/util.h"
#include "daemon/node/runtime/cdi.h"

/* {tool, lines: [each of the n lines, APP replaced by app]} */
static json_t *way(const char *tool, const char *app, size_t n, ...)
{
    json_t *lines = json_array();
    va_list ap;

    va_start(ap, n);
    for (size_t i = 0; i < n; i++) {
        const char *fmt = va_arg(ap, const char *);
        char *line = xasprintf(fmt, app);
        json_array_append_new(lines, json_string(line));
        free(line);
    }
    va_end(ap);
    return json_pack("{s:s, s:o}", "tool", tool, "lines", lines);
}

/* Why a's device holds no container now (a not here). */
static char *not_here(const struct app *a)
{
    if (a->state == APP_STOPPED)
        return xasprintf("app '%s' is stopped: a container for it is "
                         "refused until it runs again (accelctl app resume "
                         "%s)", a->name, a->name);
    if (a->nrows == 0)
        return xasprintf("app '%s' is bound to no GPU: a container for it "
                         "is refused until it is", a->name);
    return xasprintf("app '%s' has no CDI device on this machine: it is "
                     "not bound here to a Memory- or Time-sliced GPU (an "
                     "Exclusive GPU needs no shim: run the container with "
                     "the GPU's own CDI device, nvidia.com/gpu=<UUID>)",
                     a->name);
}

json_t *view_attach(struct accel_daemon *d, const struct app *a)
{
    const char *n = a->name;
    json_t *ways, *notes, *o;
    bool here;

    if (manifest_runs(&a->m))
        return NULL;
    here = cdi_app_here(d, a);
    ways = json_pack(
        "[o, o, o, o, o, o]",
        way("podman", n, 1, "podman run --device accel.dev/app=%s IMAGE"),
        way("Docker 25 and later (CDI)", n, 1,
            "docker run --device accel.dev/app=%s IMAGE"),
        way("Docker 20.10 to 24 (accel-runc)", n, 1,
            "docker run --runtime accel -e ACCEL_APP=%s IMAGE"),
        way("podman-compose", n, 1, "devices: [\"accel.dev/app=%s\"]"),
        way("docker-compose 1.29 (Docker 20.10)", n, 2, "runtime: accel",
            "environment: [\"ACCEL_APP=%s\"]"),
        way("Docker Compose v2 (Docker 25 and later)", n, 1,
            "deploy: {resources: {reservations: {devices: [{driver: cdi, "
            "device_ids: [\"accel.dev/app=%s\"]}]}}}"));
    notes = json_pack(
        "[s, s, s, s, s]",
        "Where root lacks CAP_SYS_RESOURCE (LXC guests, some VMs), podman "
        "needs --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 (compose: "
        "ulimits: {nofile: 1024, nproc: 1024}).",
        "podman-compose 1.0.3 silently ignores deploy.resources.reservations"
        ".devices: the container runs with no quota. Use devices:.",
        "Docker before 25 has no CDI: register accel-runc in "
        "/etc/docker/daemon.json, {\"runtimes\": {\"accel\": {\"path\": "
        "\"/usr/bin/accel-runc\"}}}; docker-compose 1.29 refuses driver: cdi.",
        "Docker 25 to 28.1 need \"features\": {\"cdi\": true} in "
        "daemon.json (on by default since 28.2).",
        "--gpus, nvidia.com/gpu=all and compose's driver: nvidia bypass "
        "accel: such a container is not held to the app and shows as "
        "foreign use of the card.");
    o = json_pack("{s:b, s:o, s:o}", "admits", here, "ways", ways, "notes",
                  notes);
    if (!here) {
        char *why = not_here(a);
        json_object_set_new(o, "reason", json_string(why));
        free(why);
    }
    return o;
}
