/* SPDX-License-Identifier: MIT */
/*
 * api_hami.h: the handlers of the HAMi-WebUI-compatible routes (SPEC 5.4),
 * which api.c lists in its route table. They answer the bodies HAMi-WebUI
 * and `olares-cli dashboard` send, in the shapes those clients read: no
 * envelope, memory in MiB, cores in percent. They read the state only.
 */
#ifndef ACCEL_DAEMON_API_HAMI_H
#define ACCEL_DAEMON_API_HAMI_H

struct http_req;

/* POST /hami/api/vgpu/v1/gpus {filters?:{uid,type,nodeName,provider}}
 * → {"list":[GPU]}. */
void api_hami_gpus(struct http_req *r);
/* GET /hami/api/vgpu/v1/gpu?uid= → GPU (404 unknown, 400 no uid). */
void api_hami_gpu(struct http_req *r);
/* POST /hami/api/vgpu/v1/containers {filters?, pageSize?} → {"items":[…]}:
 * one container per app and device binding, the apps the caller sees. */
void api_hami_containers(struct http_req *r);
/* GET /hami/api/vgpu/v1/container?name=&podUid=[&deviceId=] → container. */
void api_hami_container(struct http_req *r);
/* POST /hami/api/vgpu/v1/summary {filters?:{type,nodeUid,deviceId}} → the
 * sums of the matching GPUs plus gpuCount and nodeCount. */
void api_hami_summary(struct http_req *r);

#endif /* ACCEL_DAEMON_API_HAMI_H */
