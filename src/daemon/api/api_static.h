/* SPDX-License-Identifier: MIT */
/*
 * api_static.h: the web page's files (SPEC 7), served from --web-dir (the
 * route of last resort, "/" by prefix): the single-page app's index for an
 * unknown page, the precompressed twin a browser accepts, ETag and
 * Cache-Control: no-cache so a reload gets 304.
 */
#ifndef ACCEL_DAEMON_API_API_STATIC_H
#define ACCEL_DAEMON_API_API_STATIC_H

#include "daemon/api/http.h"

/* GET /… (public; /api/ and /hami/ paths answer 404 "no route") */
void api_static(struct http_req *r);

#endif /* ACCEL_DAEMON_API_API_STATIC_H */
