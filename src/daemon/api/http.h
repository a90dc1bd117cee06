/* SPDX-License-Identifier: MIT */
/*
 * http.h: acceld's HTTP server on libmicrohttpd: bodies capped at 1 MiB
 * (413 above), the route table with its generic checks (method, auth,
 * admin, content type), and the reply helpers handlers use. Handlers are
 * thin: parse, call one domain function, serialize (STYLE 15).
 */
#ifndef ACCEL_DAEMON_API_HTTP_H
#define ACCEL_DAEMON_API_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "accel/accel.h"
#include "daemon/state.h"

#define HTTP_MAX_PARAMS 4

struct http_conn;
struct slow_op;

struct http_req {
    struct accel_daemon *d;
    void *conn;                       /* struct MHD_Connection */
    const char *method;
    const char *path;                 /* decoded; a NUL shows as %00 */
    bool path_nul;                    /* the path decoded a NUL: refused */
    size_t path_nul_at;               /* where its first %00 is in path */
    char *arg_nul;                    /* a query key or value that decoded
                                         a NUL, %00 shown (owned): refused */
    const char *route;                /* matched pattern, for metrics */
    const char *params[HTTP_MAX_PARAMS]; /* {} segments of the route */
    char *pathbuf;                    /* backing store of params */
    char *body;                       /* NUL-terminated, may be NULL */
    size_t body_len;
    bool too_big;                     /* body went over the cap */
    struct auth_user user;            /* set when authenticated */
    bool authed;
    bool hami;                        /* came through --hami-listen */
    struct http_conn *hc;             /* its connection (http.c) */
    /* a request parked without a thread (http_park, http_park_app) */
    bool park;                        /* the handler asked to wait */
    bool parked;                      /* in d->parked, connection suspended */
    bool gone;                        /* its client left while parked */
    int park_kind;                    /* HTTP_PARK_* */
    char *park_app;                   /* HTTP_PARK_APP: the app it follows */
    uint64_t park_until_ns;           /* util_now_ns deadline */
    uint64_t park_seen;               /* d->ev_seq when it looked */
    struct http_req *next_parked;     /* list link */
    int64_t ev_cursor;                /* events already scanned (api.c) */
    struct slow_op *slow;             /* its slow operation (http_slow.c) */
    /* the reply */
    int status;
    bool refused;                     /* a failed check, a 409 or a 404: decided
                                         on this node's view (http.c) */
    char *reply;                      /* allocated body */
    const char *reply_type;           /* content type */
    char *reply_file;                 /* or a static file to send (owned) */
    const char *reply_encoding;       /* its Content-Encoding, or NULL */
    char reply_etag[64];              /* a static file's ETag, or "" */
    struct view_stream *reply_stream; /* or a listing to stream (owned) */
};

#define ROUTE_PUBLIC (1u << 0) /* no token needed */
#define ROUTE_ADMIN (1u << 1)  /* admins only */
#define ROUTE_BODY (1u << 2)   /* expects a JSON body */
#define ROUTE_PREFIX (1u << 3) /* pattern matches a path prefix */
#define ROUTE_SLOW (1u << 4)   /* may wait on an app's stop: runs on a
                                  thread of its own, the request parked
                                  (http_int.h) */
#define ROUTE_READ (1u << 5)   /* a POST that only reads (a query with a
                                  body): its answer is no change found
                                  made (http_run_handler) */
#define ROUTE_LOCAL (1u << 6)  /* changes this node's files, never the
                                  cluster's store: nothing in its answer
                                  is read from the cluster's view */

struct http_route {
    const char *method;   /* "GET", "POST", ... */
    const char *pattern;  /* "/api/apps/{}/resume" */
    void (*handler)(struct http_req *r);
    unsigned flags;       /* ROUTE_* */
};

/* The table lives in api.c. */
extern const struct http_route api_routes[];
extern const size_t api_nroutes;

/* Count jansson's allocations per request thread, so that a request whose
 * JSON trees took megabytes hands the freed pages back when it is done
 * (http.c, HTTP_TRIM_AFTER). Call once, before any thread starts. */
void http_count_trees(void);

/*
 * Start listening on "HOST:PORT" (PORT 0 = any free port). *out_port gets
 * the bound port. Returns ACCEL_OK or ACCEL_ESYS with *cause.
 */
enum accel_err http_start(struct accel_daemon *d, const char *listen,
                          int *out_port, char **cause);
void http_stop(struct accel_daemon *d);

/*
 * --hami-listen: a second listener, started after http_start, for
 * HAMi-WebUI's own server, which strips /api/vgpu and forwards to its
 * backend without credentials. It serves only the HAMi routes, at
 * /v1/... (the /api/vgpu/v1/... routes), every one read-only, with an
 * admin's view and no token; any other path is 404. listen must be a
 * loopback address (127.0.0.0/8) unless any is true (--hami-listen-any).
 * A local peer is served only when its uid may (http_hami_users_parse),
 * else 403: every app of the node is on the loopback too.
 */
enum accel_err http_start_hami(struct accel_daemon *d, const char *listen,
                               bool any, int *out_port, char **cause);
/* That rule alone (acceld checks it before it listens at all). */
enum accel_err http_check_hami(const char *listen, bool any, char **cause);
/* --hami-users NAME|UID[,...], the local users the HAMi listener serves
 * (by the uid owning the peer's socket; without it, every uid outside
 * --app-uid-range), as uids: *out (the caller frees it) and *out_n, set
 * only on success; ACCEL_EINVAL with *cause otherwise. */
enum accel_err http_hami_users_parse(const char *list, uint32_t **out,
                                     size_t *out_n, char **cause);

#define HTTP_PARK_EVENTS 0 /* woken by the events its user may see */
#define HTTP_PARK_APP 1    /* woken by the events of one app, or directly */

/*
 * Answer later: the connection is suspended (no thread is held) until an
 * event its user may see is appended after ev_seq `seen`, its client goes
 * away, or deadline_ns (util_now_ns clock) passes; then the handler runs
 * again with r->park_until_ns kept (r->gone set when the client left: it
 * is then answered without a dispatch). The handler sets no reply when it
 * calls this. While acceld stops, a parked request answers 503 at once.
 */
void http_park(struct http_req *r, uint64_t deadline_ns, uint64_t seen);
/* The same, woken by the events of app `app` or http_wake_req_locked. */
void http_park_app(struct http_req *r, uint64_t deadline_ns, uint64_t seen,
                   const char *app);
/* An event of app (NULL: none) owned by owner (NULL: unknown) was
 * appended: resume the parked requests it concerns (d->ev_lock held). */
void http_wake_parked_locked(struct accel_daemon *d, const char *app,
                             const char *owner);
/* Resume r if it is parked (d->ev_lock held). */
void http_wake_req_locked(struct accel_daemon *d, struct http_req *r);

/* Replies. Each takes ownership of the json it is given. */
void http_reply_data(struct http_req *r, int status, json_t *data);
void http_reply_raw(struct http_req *r, int status, json_t *body);
/* A JSON reply read out of a view stream after the lock is released
 * (takes ownership of the stream). */
struct view_stream;
void http_reply_stream(struct http_req *r, int status,
                       struct view_stream *s);
void http_reply_error(struct http_req *r, enum accel_err err,
                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with an explicit status and machine code. */
void http_reply_error_code(struct http_req *r, int status, const char *code,
                           const char *msg);
/* A failed check (SPEC 5, app-service's HandleFailedCheck as its clients
 * read it): HTTP 200, body {"code":422,"data":{"type":type,"Data":data}}. */
void http_reply_check(struct http_req *r, const char *type, json_t *data);

/* Parse the body as a JSON object (empty body → empty object). On failure
 * replies 400 and returns NULL. */
json_t *http_body_json(struct http_req *r);
/* A query argument, or NULL. */
const char *http_query(struct http_req *r, const char *key);
/* A request header, or NULL. */
const char *http_header(struct http_req *r, const char *key);

/* Route matching (exposed for tests): returns the index or -1; sets
 * *method_mismatch when the path matched with another method. */
int http_route_match(const struct http_route *routes, size_t n,
                     const char *method, const char *path,
                     const char **params, bool *method_mismatch);

#endif /* ACCEL_DAEMON_API_HTTP_H */
