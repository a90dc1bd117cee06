/* SPDX-License-Identifier: MIT */
/*
 * api_hami.h: the handlers of the HAMi-WebUI-compatible routes (SPEC 5.4),
 * which api.c lists in its route table. They answer the bodies HAMi-WebUI
 * and `olares-cli dashboard` send, in the shapes those clients read: no
 * envelope, memory in MiB, cores in percent. They read the state only.
 */
#ifndef ACCEL_DAEMON_API_API_HAMI_H
#define ACCEL_DAEMON_API_API_HAMI_H

#include <stdbool.h>

struct http_req;
struct accel_daemon;
struct monitor_facts;

/* Each route is served under /hami/api/vgpu/v1 (Olares's path) and
 * /api/vgpu/v1 (upstream HAMi-WebUI's). */

/* POST …/gpus {filters?:{uid,type,nodeName,provider}} → {"list":[GPU]}. */
void api_hami_gpus(struct http_req *r);
/* GET …/gpu?uid= → GPU ({} when unknown, as HAMi; 400 no uid). */
void api_hami_gpu(struct http_req *r);
/* POST …/containers {filters?, pageSize?} → {"items":[…]}: one container
 * per app holding a device (per-device arrays), the apps the caller sees;
 * filters.deviceId matches a prefix. */
void api_hami_containers(struct http_req *r);
/* GET …/container?name=&podUid=[&deviceId=] → container ({} unknown). */
void api_hami_container(struct http_req *r);
/* POST …/nodes {filters?:{ip,type,isSchedulable}} → {"list":[Node]}: the
 * nodes holding a GPU. */
void api_hami_nodes(struct http_req *r);
/* GET …/node?uid= → Node ({} unknown; uid is the node name). */
void api_hami_node(struct http_req *r);
/* POST /hami/api/vgpu/v1/summary {filters?:{type,nodeUid,deviceId}} → the
 * sums of the matching GPUs plus gpuCount and nodeCount. */
void api_hami_summary(struct http_req *r);
/* POST …/gpu-types {filters?:{provider}} → {"list":[{type, …}]}: one entry
 * per GPU type (card.proto GetAllGPUTypes). */
void api_hami_gpu_types(struct http_req *r);
/* POST …/monitor/summary {node?, device?} → {distributionRate:{vgpu,
 * memory, core}, scaling:{…}} (monitor.proto Summary), percent. */
void api_hami_monitor_summary(struct http_req *r);

/* The facts of the monitor metrics (monitor.h) as the state holds them
 * now, the container series those user (admin: every app) sees; takes
 * d->lock. Release with monitor_facts_release. */
void api_hami_facts(struct accel_daemon *d, const char *user, bool admin,
                    struct monitor_facts *out);

#endif /* ACCEL_DAEMON_API_API_HAMI_H */
