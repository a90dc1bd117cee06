/* SPDX-License-Identifier: MIT */
/*
 * http.c: libmicrohttpd glue. One request context per connection collects
 * the body (capped), then dispatch() runs the generic checks of the route
 * table and the handler, and the reply is queued.
 *
 * Under abuse (SPEC 5.6): MHD's own connection timeout is reset by every
 * byte, so each connection also carries the time its current request
 * began; a sweep on the waker thread shuts down the socket of any request
 * whose headers are not in after HTTP_HEADER_DEADLINE_S or whose body is
 * not in after HTTP_BODY_DEADLINE_S, however the bytes trickle. Parked
 * requests (long-polls, slow operations) hold no thread; the same sweep
 * polls their sockets and frees at once those whose client has gone.
 */
#include "common/accel_setup.h"
#include "daemon/api/http.h"
#include "daemon/api/http_int.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <microhttpd.h>
#include <pthread.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/api/auth.h"
#include "daemon/api/metrics.h"
#include "daemon/api/view.h"
#include "daemon/log.h"
#include "daemon/node/cluster/cluster.h"
#include "daemon/state.h"
#include "daemon/store/store.h"

#define HTTP_HEADER_DEADLINE_S 10 /* request line + headers, from its start */
#define HTTP_BODY_DEADLINE_S 30   /* the whole body, from the request's start */
#define HTTP_IDLE_TIMEOUT_S 30    /* MHD's inactivity timeout */
#define HTTP_THREADS 4u           /* epoll threads; no request blocks one */
#define HTTP_THREADS_CLUSTER 16u  /* with an etcd store: a change waits in
                                     its handler for etcd's round trip, and
                                     the installs waiting together are sent
                                     as one transaction (store.h) */
#define HTTP_MAX_CONNECTIONS 16384u /* in total, if the fd limit allows */
#define HTTP_MAX_PER_PEER 8192u   /* per client address: above the 2,000
                                     slow connections one local client may
                                     hold, so localhost is never locked out */

/* Where a connection's current request is (struct http_conn.phase). */
enum conn_phase {
    CONN_HEADERS, /* waiting for the request line and headers */
    CONN_BODY,    /* headers in, waiting for the body */
    CONN_ANSWER,  /* dispatched: being answered or parked, no deadline */
};

#define HTTP_NUL_KEEP 4 /* NUL-decoding strings kept per request line */

/* A string of a request line that decoded a NUL (http_conn.nul). */
struct http_nul {
    const char *buf;            /* MHD's decoded buffer (compared only) */
    char *text;                 /* decoded, each NUL as %00 (owned) */
    size_t at;                  /* offset of the first %00 in text */
};

/* One accepted socket (MHD's socket context), on the server's list. */
struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    _Atomic uint64_t since_ns;  /* when the current request began */
    _Atomic int phase;          /* enum conn_phase */
    bool cut;                   /* shut down by the sweep */
    /* the strings of the request line being read (its path, its query
     * arguments) that decoded a NUL (%00): MHD hands them on as C strings
     * that end there. Each as MHD's buffer, and the whole decoded text
     * with every NUL written back as %00 (owned); req_new takes them. */
    struct http_nul nul[HTTP_NUL_KEEP];
    size_t nnul;                /* entries used (more are dropped) */
    bool peer_ok;               /* --hami-listen let its peer in: not
                                   looked up again (http_hami.c) */
};

struct http_server {
    struct MHD_Daemon *mhd;
    struct MHD_Daemon *hami;  /* --hami-listen, or NULL */
    pthread_t waker;      /* deadlines of parked requests and connections */
    bool waker_running;
    pthread_mutex_t conn_lock; /* guards conns */
    struct http_conn *conns;   /* every open connection */
};

static int split_segments(char *p, char **seg, int max)
{
    int n = 0;
    while (*p) {
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        if (n == max)
            return -1;
        seg[n++] = p;
        while (*p && *p != '/')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return n;
}

static bool match_pattern(const char *pattern, const char *path,
                          const char **params, bool prefix)
{
    char pat[256], buf[1024];
    char *ps[32], *xs[32];
    int np, nx, k = 0;

    if (strlen(pattern) >= sizeof pat || strlen(path) >= sizeof buf)
        return false;
    memcpy(pat, pattern, strlen(pattern) + 1);
    memcpy(buf, path, strlen(path) + 1);
    np = split_segments(pat, ps, 32);
    nx = split_segments(buf, xs, 32);
    if (np < 0 || nx < 0 || (prefix ? nx < np : nx != np))
        return false;
    for (int i = 0; i < np; i++) {
        if (strcmp(ps[i], "{}") == 0) {
            if (k < HTTP_MAX_PARAMS && params)
                params[k] = (const char *)(uintptr_t)(xs[i] - buf);
            k++;
            continue;
        }
        if (strcmp(ps[i], xs[i]) != 0)
            return false;
    }
    return true;
}

int http_route_match(const struct http_route *routes, size_t n,
                     const char *method, const char *path,
                     const char **params, bool *method_mismatch)
{
    *method_mismatch = false;
    for (size_t i = 0; i < n; i++) {
        bool prefix = (routes[i].flags & ROUTE_PREFIX) != 0;
        if (!match_pattern(routes[i].pattern, path, params, prefix))
            continue;
        if (strcmp(routes[i].method, method) == 0)
            return (int)i;
        *method_mismatch = true;
    }
    return -1;
}

/*
 * Listings build JSON trees of many small blocks (GET /api/apps at 20,000
 * apps: 170 MiB of them for a 26 MB answer). glibc hands back only the
 * free top of a heap, never the free pages between live blocks, so once
 * such a tree is freed its pages would stay resident until the next one.
 * Every jansson allocation of the request's thread is counted, and a
 * request whose trees took HTTP_TRIM_AFTER bytes or more gives the free
 * pages back before its answer goes out (malloc_trim: 1-2 ms, 65 ms after
 * a 130 MiB tree; after such requests only). Trimming once the answer is
 * sent would race with a client that reads the memory right after.
 */
#define HTTP_TRIM_AFTER (4 * 1024 * 1024)

static _Thread_local size_t tree_bytes; /* jansson bytes of this request */

static void *tree_malloc(size_t n)
{
    tree_bytes += n;
    return malloc(n);
}

static void set_reply(struct http_req *r, int status, json_t *body)
{
    free(r->reply);
    r->status = status;
    r->reply = json_dumps(body, JSON_COMPACT);
    r->reply_type = "application/json";
    json_decref(body);
}

void http_reply_data(struct http_req *r, int status, json_t *data)
{
    set_reply(r, status,
              json_pack("{s:i, s:s, s:o}", "code", status, "message", "",
                        "data", data ? data : json_null()));
}

void http_reply_stream(struct http_req *r, int status,
                       struct view_stream *s)
{
    free(r->reply);
    r->reply = NULL;
    view_stream_free(r->reply_stream);
    r->reply_stream = s;
    r->status = status;
    r->reply_type = "application/json";
}

void http_reply_raw(struct http_req *r, int status, json_t *body)
{
    set_reply(r, status, body);
}

void http_reply_error_code(struct http_req *r, int status, const char *code,
                           const char *msg)
{
    /* a conflict, or a name this view does not know yet (installed a
     * moment ago through another node): in a cluster, decided again once
     * the view is as fresh as etcd (http_run_handler) */
    r->refused = status == 409 || status == 404;
    set_reply(r, status,
              json_pack("{s:i, s:s, s:s}", "code", status, "error", code,
                        "message", msg));
}

void http_reply_error(struct http_req *r, enum accel_err err, const char *fmt,
                      ...)
{
    va_list ap;
    char *msg;
    va_start(ap, fmt);
    msg = xvasprintf(fmt, ap);
    va_end(ap);
    http_reply_error_code(r, accel_err_http_status(err), accel_err_name(err),
                          msg);
    free(msg);
}

void http_reply_check(struct http_req *r, const char *type, json_t *data)
{
    r->refused = true;
    set_reply(r, 200,
              json_pack("{s:i, s:{s:s, s:o}}", "code", 422, "data", "type",
                        type, "Data", data ? data : json_null()));
}

json_t *http_body_json(struct http_req *r)
{
    json_error_t e;
    json_t *v;

    if (r->body == NULL || r->body_len == 0)
        return json_object();
    v = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &e);
    if (v == NULL) {
        http_reply_error(r, ACCEL_EPARSE,
                         "request body is not valid JSON: line %d column %d: "
                         "%s",
                         e.line, e.column, e.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        http_reply_error(r, ACCEL_EINVAL, "request body must be a JSON object");
        return NULL;
    }
    return v;
}

const char *http_query(struct http_req *r, const char *key)
{
    if (r->conn == NULL) /* a slow operation's copy (http_slow.c) */
        return NULL;
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_header(struct http_req *r, const char *key)
{
    if (r->conn == NULL)
        return NULL;
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

static bool content_type_ok(struct http_req *r)
{
    const char *ct = http_header(r, "Content-Type");
    if (r->body_len == 0 || ct == NULL)
        return true;
    /* curl -d and urllib send form-urlencoded unless told: treat it as
     * "not said" and parse the body as JSON */
    return strncmp(ct, "application/json", 16) == 0 ||
           strncmp(ct, "application/x-www-form-urlencoded", 33) == 0 ||
           strncmp(ct, "application/yaml", 16) == 0 ||
           strncmp(ct, "text/yaml", 9) == 0 ||
           strncmp(ct, "application/x-yaml", 18) == 0;
}

/*
 * A path whose decoding held a NUL (%00) is refused whatever route it
 * would reach: a name read from it would end at the NUL (alice1%00 is not
 * alice1). The message names the first such segment.
 */
static void refuse_nul_path(struct http_req *r)
{
    const char *p = r->path, *at = p + r->path_nul_at, *seg = at, *end;
    int idx = 0;
    size_t len;

    while (seg > p && seg[-1] != '/')
        seg--;
    for (const char *q = p; q < seg; q++)
        idx += *q == '/';
    end = strchr(seg, '/');
    len = end ? (size_t)(end - seg) : strlen(seg);
    http_reply_error(r, ACCEL_EINVAL,
                     "path segment %d (\"%.*s\") of %.200s contains a NUL "
                     "byte (%%00): no segment of a path may contain one",
                     idx, (int)(len > 200 ? 200 : len), seg, p);
}

#define HAMI_PREFIX "/api/vgpu" /* what HAMi-WebUI's server strips */

/* The HAMi routes of api_routes, in their order (built once). */
static struct http_route hami_table[64];
static size_t nhami_routes;
static pthread_once_t hami_once = PTHREAD_ONCE_INIT;

static void hami_build(void)
{
    for (size_t i = 0; i < api_nroutes && nhami_routes < 64; i++)
        if (strncmp(api_routes[i].pattern, HAMI_PREFIX "/v1/",
                    sizeof HAMI_PREFIX + 3) == 0)
            hami_table[nhami_routes++] = api_routes[i];
}

static const struct http_route *hami_routes(void)
{
    pthread_once(&hami_once, hami_build);
    return hami_table;
}

/* A request of the --hami-listen listener: /v1/... is the HAMi route
 * /api/vgpu/v1/..., served with an admin's view and no token (those
 * routes only read), to the peers http_hami.c lets in. false after
 * replying 404 to anything else, 403 to another peer. */
static bool hami_rewrite(struct http_req *r)
{
    char *full;
    /* once: no HAMi route parks, so none is dispatched again */
    if (strncmp(r->path, "/v1/", 4) != 0) {
        http_reply_error(r, ACCEL_ENOTFOUND, "the HAMi listener serves "
                         "HAMi-WebUI's backend routes only (/v1/...), not "
                         "%.200s", r->path);
        return false;
    }
    if (r->hc == NULL || !r->hc->peer_ok) {
        if (!http_hami_peer_allowed(r))
            return false;
        if (r->hc != NULL)
            r->hc->peer_ok = true; /* its uid cannot change */
    }
    full = xasprintf(HAMI_PREFIX "%s", r->path);
    free((char *)r->path);
    r->path = full;
    util_strlcpy(r->user.name, "hami-webui", sizeof r->user.name);
    r->user.admin = true;
    r->authed = true;
    return true;
}

/* The token of "Authorization: Bearer <t>", else of Olares's gateway
 * header "X-Authorization: <t>" (a "Bearer " prefix there is allowed);
 * NULL when neither carries one. */
static const char *bearer_token(struct http_req *r)
{
    const char *h = http_header(r, "Authorization");
    if (h != NULL && strncmp(h, "Bearer ", 7) == 0 && h[7] != '\0')
        return h + 7;
    h = http_header(r, "X-Authorization");
    if (h != NULL && strncmp(h, "Bearer ", 7) == 0)
        h += 7;
    return h != NULL && *h != '\0' ? h : NULL;
}

/* Authenticate r's token (SPEC 3) against the users: sets r->user; on
 * failure replies 401 and returns false. No lock held. */
static bool authenticate(struct http_req *r)
{
    const char *tok = bearer_token(r);

    if (tok == NULL) {
        http_reply_error(r, ACCEL_EUNAUTH,
                         "Authorization: Bearer <token> (or X-Authorization: "
                         "<token>) is required");
        return false;
    }
    if (!auth_find(r->d, tok, &r->user)) {
        http_reply_error(r, ACCEL_EUNAUTH, "the token is not valid");
        return false;
    }
    r->authed = true;
    return true;
}

/* An agent (acceld --role agent) decides nothing: its view holds only its
 * own node's apps. Every route that would change the cluster is refused
 * with 421 Misdirected Request (docs/api.md, "A node that is an agent"),
 * before authentication: nothing is read or changed. */
static void refuse_on_agent(struct http_req *r)
{
    char *msg = xasprintf(
        "node %s runs acceld --role agent: it runs and enforces the apps "
        "bound to its cards but decides nothing, and %.20s %.200s changes "
        "the cluster; send it to an API server instead (a node whose acceld "
        "runs --role api or --role both, the default; for example "
        "`accelctl --server http://API-SERVER:PORT ...`)",
        r->d->cfg.node_name, r->method, r->path);
    http_reply_error_code(r, 421, "agent_node", msg);
    free(msg);
}

static void dispatch(struct http_req *r)
{
    bool mismatch;
    const char *offs[HTTP_MAX_PARAMS] = {0};
    int i;
    const struct http_route *rt;

    if (r->path_nul) {
        refuse_nul_path(r);
        return;
    }
    if (r->arg_nul) {
        http_reply_error(r, ACCEL_EINVAL,
                         "query argument \"%.200s\" contains a NUL byte "
                         "(%%00): no argument may contain one",
                         r->arg_nul);
        return;
    }
    if (r->hami && !hami_rewrite(r))
        return;
    i = http_route_match(api_routes, api_nroutes, r->method, r->path, offs,
                         &mismatch);
    if (r->hami && (i >= 0 || mismatch)) {
        /* only the HAMi routes: matched among them alone */
        const struct http_route *hr = hami_routes(); /* sets the count */
        int j = http_route_match(hr, nhami_routes, r->method, r->path, offs,
                                 &mismatch);
        i = j < 0 ? -1 : i;
    }
    if (i < 0) {
        /* a path is echoed up to 200 bytes: no answer grows with it; the
         * HAMi listener's, as it was asked (/v1/..., not the rewritten
         * /api/vgpu/v1/...) */
        const char *asked = r->hami ? r->path + strlen(HAMI_PREFIX) : r->path;
        if (mismatch)
            http_reply_error(r, ACCEL_EMETHOD, "%.20s is not allowed on %.200s",
                             r->method, asked);
        else
            http_reply_error(r, ACCEL_ENOTFOUND, "no route for %.20s %.200s",
                             r->method, asked);
        return;
    }
    rt = &api_routes[i];
    r->route = rt->pattern;
    if (r->d->cfg.role == ROLE_AGENT && strcmp(r->method, "GET") != 0 &&
        strcmp(r->method, "HEAD") != 0) {
        refuse_on_agent(r);
        return;
    }
    /* params point into a private copy of the path, split the same way
     * match_pattern split its buffer, so the offsets line up */
    free(r->pathbuf); /* a resumed long-poll is dispatched again */
    r->pathbuf = xstrdup(r->path);
    {
        char *seg[32];
        split_segments(r->pathbuf, seg, 32);
        for (int k = 0; k < HTTP_MAX_PARAMS; k++)
            if (offs[k] != NULL)
                r->params[k] = r->pathbuf + (uintptr_t)offs[k];
    }
    if (r->too_big) {
        http_reply_error(r, ACCEL_ETOOBIG,
                         "request body exceeds %d bytes", ACCEL_MAX_BODY);
        return;
    }
    if (!(rt->flags & ROUTE_PUBLIC) && !r->hami) {
        if (!authenticate(r))
            return;
        if ((rt->flags & ROUTE_ADMIN) && !r->user.admin) {
            http_reply_error(r, ACCEL_EFORBIDDEN,
                             "only an admin may %.20s %.200s", r->method,
                             r->path);
            return;
        }
    }
    if ((rt->flags & ROUTE_BODY) && !content_type_ok(r)) {
        http_reply_error(r, ACCEL_EMEDIA,
                         "Content-Type must be application/json or "
                         "application/yaml");
        return;
    }
    if (rt->flags & ROUTE_SLOW)
        http_slow_dispatch(r, rt);
    else
        http_run_handler(r, rt);
}

#define HTTP_CONFLICT_TRIES 8 /* decisions retried after a cluster race */

/* An answer's text, sent: a large one (GET /metrics: 11 MB at 20,000
 * apps, grown by doubling) leaves its earlier sizes free in the heap. */
static void reply_free(void *body)
{
    bool big = malloc_usable_size(body) >= HTTP_TRIM_AFTER;
    free(body);
    if (big)
        malloc_trim(0);
}

void http_count_trees(void)
{
    json_set_alloc_funcs(tree_malloc, free);
}

void http_run_handler(struct http_req *r, const struct http_route *rt)
{
    bool synced = false;
    bool cluster = store_is_cluster(r->d->store) &&
                   strcmp(r->method, "GET") != 0;

    tree_bytes = 0;
    for (int tries = 1;; tries++) {
        int64_t rev, seen = store_view_rev(r->d->store);
        uint64_t commits = state_commits_here();
        bool unwritten;
        r->refused = false;
        if (cluster)
            state_refusals_hold(); /* until the decision stands */
        state_set_actor(r->authed ? r->user.name : NULL);
        rt->handler(r);
        state_set_actor(NULL);
        rev = state_take_conflict();
        /* a change answered as made already, writing nothing (a mode
         * already set, an app already stopped): as old as the view it
         * was read from */
        unwritten = !(rt->flags & (ROUTE_READ | ROUTE_LOCAL)) &&
                    r->status >= 200 &&
                    r->status <= 299 && state_commits_here() == commits;
        if (tries == HTTP_CONFLICT_TRIES)
            break;
        if (rev != 0 && (r->status < 200 || r->status > 299)) {
            /* another acceld of the cluster changed what this request
             * decided on, and nothing of it was written: once this node's
             * view shows that change, decide again (the answer may now
             * differ). Not after a success: the change is written, and a
             * commit that lost afterwards was a step after it (the save of
             * `running` after a start); deciding again would answer about
             * the change as if it had not been made ("already
             * installed"), the randomized test saw it. */
            store_wait_rev(r->d->store, rev, 2000);
        } else if ((r->refused || unwritten) && !synced && cluster) {
            /* a refusal, or a change found made already, decided on a
             * view that may lag the cluster (a release, a mode switch
             * acknowledged by another node a moment ago): bring the view
             * up to etcd's current revision and, if it moved, decide
             * again, so that an answer that wrote nothing is never older
             * than the request (the randomized test saw a switch answered
             * "unchanged" from a view that had not yet seen the switch
             * before it) */
            bool moved = false;
            synced = true;
            if (store_view_sync(r->d->store, seen, 2000, &moved) !=
                ACCEL_OK) {
                /* a refusal acknowledges nothing and may stand; "made
                 * already" would acknowledge what etcd may not hold */
                if (unwritten)
                    http_reply_error(
                        r, ACCEL_EUNAVAIL,
                        "this node could not bring its view of the cluster "
                        "up to date (etcd did not answer in time), so it "
                        "cannot say whether this is already so; nothing was "
                        "changed: read the state back and try again");
                break;
            }
            if (!moved)
                break;
        } else {
            break;
        }
        state_refusals_release(r->d, false); /* decided again below */
        free(r->reply);
        r->reply = NULL;
        view_stream_free(r->reply_stream);
        r->reply_stream = NULL;
        r->status = 0;
    }
    state_refusals_release(r->d, true); /* the decision that stands */
    /* nothing that changed is acknowledged before it is on disk */
    if (strcmp(r->method, "GET") != 0 && state_durable_wait(r->d) != ACCEL_OK)
        http_reply_error(r, ACCEL_EIO,
                         "the change could not be written to disk; it may "
                         "not survive a crash");
    if (tree_bytes >= HTTP_TRIM_AFTER)
        malloc_trim(0);
}

static void req_free(struct http_req *r)
{
    if (r == NULL)
        return;
    free(r->body);
    free(r->reply);
    free(r->pathbuf);
    free(r->reply_file);
    free(r->park_app);
    view_stream_free(r->reply_stream);
    free((char *)r->path);
    free(r->arg_nul);
    free(r);
}

/* The caching headers of the web page's files (api.c h_static). */
static void static_headers(struct MHD_Response *resp, const struct http_req *r)
{
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Vary", "Accept-Encoding");
    if (r->reply_etag[0] != '\0')
        MHD_add_response_header(resp, "ETag", r->reply_etag);
    if (r->reply_encoding != NULL)
        MHD_add_response_header(resp, "Content-Encoding", r->reply_encoding);
}

static enum MHD_Result queue_file(struct MHD_Connection *c, struct http_req *r)
{
    struct MHD_Response *resp;
    struct stat st;
    enum MHD_Result ret;
    int fd = open(r->reply_file, O_RDONLY | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        http_reply_error(r, ACCEL_ENOTFOUND, "no such file");
        free(r->reply_file);
        r->reply_file = NULL;
        return MHD_NO;
    }
    resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    MHD_add_response_header(resp, "Content-Type", r->reply_type);
    static_headers(resp, r);
    ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    size_t n = view_stream_read(cls, buf, max);
    (void)pos; /* MHD reads in order */
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_done(void *cls)
{
    view_stream_free(cls);
}

/* Send a listing straight from its parts: no megabyte-sized buffer to
 * allocate, fault in and copy for every request. */
static enum MHD_Result queue_stream(struct MHD_Connection *c,
                                    struct http_req *r)
{
    struct view_stream *s = r->reply_stream;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        view_stream_size(s), 64 * 1024, stream_read, s, stream_done);
    enum MHD_Result ret;

    r->reply_stream = NULL; /* MHD owns it now */
    MHD_add_response_header(resp, "Content-Type", r->reply_type);
    ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A cluster node cut off from etcd still answers from its last view
 * (docs/cluster.md): X-Accel-Stale says so, with the milliseconds since
 * etcd last renewed its lease, so that a client can tell a stale answer
 * from a current one. */
static void stale_header(struct MHD_Response *resp, struct accel_daemon *d)
{
    int64_t ms = cluster_stale_ms(d);
    char v[32];
    if (ms <= 0)
        return;
    snprintf(v, sizeof v, "%" PRId64, ms);
    MHD_add_response_header(resp, "X-Accel-Stale", v);
}

static enum MHD_Result queue_reply(struct MHD_Connection *c, struct http_req *r)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    const char *body;

    if (r->reply_file && queue_file(c, r) == MHD_YES)
        return MHD_YES;
    if (r->reply_stream && r->reply == NULL)
        return queue_stream(c, r);
    if (r->reply == NULL)
        http_reply_error(r, ACCEL_ESYS, "handler gave no answer");
    /* the reply is handed over, not copied: listings run to megabytes */
    body = r->reply;
    r->reply = NULL;
    resp = MHD_create_response_from_buffer_with_free_callback(
        strlen(body), (void *)body, reply_free);
    MHD_add_response_header(resp, "Content-Type", r->reply_type);
    stale_header(resp, r->d);
    if (r->status == 304) /* a static file the browser already has */
        static_headers(resp, r);
    ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

void http_park(struct http_req *r, uint64_t deadline_ns, uint64_t seen)
{
    r->park = true;
    r->park_kind = HTTP_PARK_EVENTS;
    r->park_until_ns = deadline_ns;
    r->park_seen = seen;
}

void http_park_app(struct http_req *r, uint64_t deadline_ns, uint64_t seen,
                   const char *app)
{
    r->park = true;
    r->park_kind = HTTP_PARK_APP;
    r->park_until_ns = deadline_ns;
    r->park_seen = seen;
    free(r->park_app);
    r->park_app = xstrdup(app);
}

/* Take r out of the parked list (ev_lock held). */
static void unlink_locked(struct accel_daemon *d, struct http_req *r)
{
    struct http_req **pp = &d->parked;
    while (*pp && *pp != r)
        pp = &(*pp)->next_parked;
    if (*pp)
        *pp = r->next_parked;
    r->next_parked = NULL;
    r->parked = false;
}

/* Take r out of the parked list and resume its connection (ev_lock
 * held); nothing when it is not parked. */
static void resume_locked(struct accel_daemon *d, struct http_req *r)
{
    if (!r->parked)
        return;
    unlink_locked(d, r);
    MHD_resume_connection(r->conn);
}

/* Would an event of app (owned by owner) interest parked request r? */
static bool wakes(const struct http_req *r, const char *app,
                  const char *owner)
{
    if (r->park_kind == HTTP_PARK_APP)
        return app && r->park_app && strcmp(app, r->park_app) == 0;
    /* a member's long-poll: only events it may see (api.c's rule) */
    return r->user.admin ||
           (owner && (strcmp(owner, r->user.name) == 0 ||
                      strcmp(owner, ACCEL_SHARED_OWNER) == 0));
}

void http_wake_parked_locked(struct accel_daemon *d, const char *app,
                             const char *owner)
{
    struct http_req **pp = &d->parked;
    while (*pp) {
        struct http_req *r = *pp;
        if (wakes(r, app, owner)) {
            *pp = r->next_parked;
            r->next_parked = NULL;
            r->parked = false;
            MHD_resume_connection(r->conn);
        } else {
            pp = &r->next_parked;
        }
    }
}

void http_wake_req_locked(struct accel_daemon *d, struct http_req *r)
{
    resume_locked(d, r);
}

/* Resume every parked request (ev_lock held): the server is stopping. */
static void wake_all_locked(struct accel_daemon *d)
{
    while (d->parked)
        resume_locked(d, d->parked);
}

/*
 * Suspend the connection of a request whose handler parked it, unless an
 * event already came since it looked (then it is dispatched again at once).
 * Returns true when parked.
 */
static bool park_connection(struct accel_daemon *d, struct http_req *r)
{
    bool parked = false;
    pthread_mutex_lock(&d->ev_lock);
    if (d->ev_seq == r->park_seen && !d->stopping) {
        r->parked = true;
        r->next_parked = d->parked;
        d->parked = r;
        MHD_suspend_connection(r->conn);
        parked = true;
    }
    pthread_mutex_unlock(&d->ev_lock);
    return parked;
}

/* Resume the parked requests whose deadline has passed or whose client
 * has closed its end (ev_lock held). */
static void sweep_parked_locked(struct accel_daemon *d, uint64_t now)
{
    struct http_req **pp = &d->parked;
    struct pollfd pf;
    while (*pp) {
        struct http_req *r = *pp;
        bool gone = false;
        if (r->hc) {
            pf = (struct pollfd){.fd = r->hc->fd, .events = POLLRDHUP};
            gone = poll(&pf, 1, 0) > 0 &&
                   (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
        }
        if (now < r->park_until_ns && !gone) {
            pp = &r->next_parked;
            continue;
        }
        r->gone = gone;
        *pp = r->next_parked;
        r->next_parked = NULL;
        r->parked = false;
        MHD_resume_connection(r->conn);
    }
}

/* Shut down the sockets of requests past their deadline: MHD sees the
 * end of the stream and closes the connection on its own thread. */
static void sweep_conns(struct http_server *s, uint64_t now)
{
    const uint64_t hd = HTTP_HEADER_DEADLINE_S * 1000000000ULL;
    const uint64_t bd = HTTP_BODY_DEADLINE_S * 1000000000ULL;
    pthread_mutex_lock(&s->conn_lock);
    for (struct http_conn *c = s->conns; c; c = c->next) {
        int ph = atomic_load(&c->phase);
        uint64_t since = atomic_load(&c->since_ns);
        if (c->cut || ph == CONN_ANSWER || now < since ||
            now - since < (ph == CONN_HEADERS ? hd : bd))
            continue;
        c->cut = true;
        shutdown(c->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->conn_lock);
}

/* Every 100 ms: parked deadlines, gone clients, request deadlines. */
static void *waker_main(void *arg)
{
    struct accel_daemon *d = arg;
    while (!d->stopping) {
        uint64_t now;
        usleep(100 * 1000);
        now = util_now_ns();
        pthread_mutex_lock(&d->ev_lock);
        sweep_parked_locked(d, now);
        pthread_mutex_unlock(&d->ev_lock);
        sweep_conns(d->http, now);
    }
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct accel_daemon *d = cls;
    struct http_server *s = d->http;
    struct http_conn *hc = *socket_context;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        hc = xcalloc(1, sizeof(*hc));
        hc->fd = ci ? ci->connect_fd : -1;
        atomic_init(&hc->since_ns, util_now_ns());
        atomic_init(&hc->phase, CONN_HEADERS);
        pthread_mutex_lock(&s->conn_lock);
        hc->next = s->conns;
        if (s->conns)
            s->conns->prev = hc;
        s->conns = hc;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = hc;
        return;
    }
    if (hc == NULL)
        return;
    /* MHD closes the socket after this returns: the sweep, which holds
     * conn_lock while it shuts one down, never touches a closed fd */
    pthread_mutex_lock(&s->conn_lock);
    if (hc->prev)
        hc->prev->next = hc->next;
    else
        s->conns = hc->next;
    if (hc->next)
        hc->next->prev = hc->prev;
    pthread_mutex_unlock(&s->conn_lock);
    for (size_t i = 0; i < hc->nnul; i++)
        free(hc->nul[i].text);
    free(hc);
    *socket_context = NULL;
}

static struct http_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/*
 * MHD's unescaper (%HH), which also notes a path or argument that decodes
 * to a NUL: MHD hands the url on as a C string that ends there, so
 * "/api/apps/alice1%00" would reach the routes as "/api/apps/alice1". The
 * url is decoded in place and handed to on_request as the same buffer:
 * req_new recognises it by its address.
 */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *s)
{
    size_t n = MHD_http_unescape(s), nnul = 0, k = 0;
    struct http_conn *hc;
    struct http_nul *e;
    char *out;

    (void)cls;
    if (memchr(s, '\0', n) == NULL)
        return n;
    hc = conn_of(c);
    if (hc == NULL || hc->nnul == HTTP_NUL_KEEP)
        return n;
    for (size_t i = 0; i < n; i++)
        nnul += s[i] == '\0';
    out = xmalloc(n + 2 * nnul + 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\0') {
            memcpy(out + k, "%00", 3);
            k += 3;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = '\0';
    e = &hc->nul[hc->nnul++];
    e->buf = s;
    e->text = out;
    e->at = (size_t)((char *)memchr(s, '\0', n) - s);
    return n;
}

/* MHD's hook at the start of each request line, before it decodes the
 * url: what the unescaper noted for an earlier request that never reached
 * on_request is dropped. Returns NULL (*con_cls stays NULL). */
static void *request_line_begins(void *cls, const char *uri,
                                 struct MHD_Connection *c)
{
    struct http_conn *hc = conn_of(c);

    (void)cls, (void)uri;
    for (size_t i = 0; hc && i < hc->nnul; i++)
        free(hc->nul[i].text);
    if (hc)
        hc->nnul = 0;
    return NULL;
}

/* Hand r what the unescaper noted for this request line: the path with
 * its NULs shown (r->path_nul), or the first argument with one
 * (r->arg_nul). Clears the connection's notes. */
static void take_nuls(struct http_req *r, const char *url)
{
    struct http_conn *hc = r->hc;

    for (size_t i = 0; hc && i < hc->nnul; i++) {
        struct http_nul *e = &hc->nul[i];
        if (e->buf == url && !r->path_nul) {
            free((char *)r->path);
            r->path = e->text; /* takes it: never matches a route */
            r->path_nul = true;
            r->path_nul_at = e->at;
        } else if (r->arg_nul == NULL) {
            r->arg_nul = e->text;
        } else {
            free(e->text);
        }
        e->text = NULL;
    }
    if (hc)
        hc->nnul = 0;
}

/* A body announced far larger than the cap (HTTP_DISCARD_MAX) is refused
 * before it is read; one a little over it is read, dropped and refused
 * afterwards, so a client that sends without waiting reads the 413. */
#define HTTP_DISCARD_MAX (16u * ACCEL_MAX_BODY)
static bool announced_too_big(struct MHD_Connection *c)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 "Content-Length");
    char *end;
    unsigned long long n;
    if (cl == NULL)
        return false;
    n = strtoull(cl, &end, 10);
    return *end == '\0' && n > HTTP_DISCARD_MAX;
}

/* The first call for a request: its context, and the deadlines moved on
 * from headers to body. */
static struct http_req *req_new(struct accel_daemon *d,
                                struct MHD_Connection *c, const char *url,
                                const char *method)
{
    struct http_req *r = xcalloc(1, sizeof(*r));
    r->d = d;
    r->conn = c;
    r->method = method;
    r->path = xstrdup(url);
    r->hc = conn_of(c);
    take_nuls(r, url);
    if (r->hc)
        atomic_store(&r->hc->phase, CONN_BODY);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct http_req *r = *con_cls;
    uint64_t t0;
    enum MHD_Result ret;
    (void)version;

    if (r == NULL) {
        r = req_new(cls, c, url, method);
        *con_cls = r;
        if (!announced_too_big(c))
            return MHD_YES;
        /* answer now: MHD then closes without reading the body */
        r->too_big = true;
        http_reply_error(r, ACCEL_ETOOBIG, "request body exceeds %d bytes",
                         ACCEL_MAX_BODY);
        if (r->hc)
            atomic_store(&r->hc->phase, CONN_ANSWER);
        return queue_reply(c, r);
    }
    if (r->status != 0 && r->too_big)
        return MHD_YES; /* refused above: the rest is discarded */
    if (*upload_size > 0) {
        if (!r->too_big && r->body_len + *upload_size <= ACCEL_MAX_BODY) {
            r->body = xrealloc(r->body, r->body_len + *upload_size + 1);
            memcpy(r->body + r->body_len, upload, *upload_size);
            r->body_len += *upload_size;
            r->body[r->body_len] = '\0';
        } else {
            r->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->hc)
        atomic_store(&r->hc->phase, CONN_ANSWER);
    if (r->gone) {
        /* the client left while parked: answer nothing useful, at once */
        http_reply_error(r, ACCEL_ESYS, "the client closed the connection");
        return queue_reply(c, r);
    }
    t0 = util_now_ns();
    do {
        r->park = false;
        dispatch(r);
        if (r->park && r->d->stopping) {
            http_reply_error(r, ACCEL_EBUSY, "acceld is stopping; retry "
                             "when it is back");
            r->status = 503;
            break;
        }
        if (r->park && park_connection(r->d, r))
            return MHD_YES; /* answered when resumed */
    } while (r->park);
    ret = queue_reply(c, r);
    metrics_http_observe(r->d, r->method, r->route ? r->route : "other", r->status,
                         util_now_ns() - t0);
    return ret;
}

/* The --hami-listen listener's requests: marked, then as any other. */
static enum MHD_Result on_request_hami(void *cls, struct MHD_Connection *c,
                                       const char *url, const char *method,
                                       const char *version, const char *upload,
                                       size_t *upload_size, void **con_cls)
{
    if (*con_cls == NULL) {
        enum MHD_Result ret = on_request(cls, c, url, method, version, upload,
                                         upload_size, con_cls);
        struct http_req *r = *con_cls;
        if (r)
            r->hami = true;
        return ret;
    }
    return on_request(cls, c, url, method, version, upload, upload_size,
                      con_cls);
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    struct http_req *r = *con_cls;
    struct accel_daemon *d = cls;
    struct http_conn *hc = r ? r->hc : conn_of(c);
    (void)toe;
    if (r) {
        pthread_mutex_lock(&d->ev_lock);
        if (r->parked)
            unlink_locked(d, r);
        http_slow_detach_locked(r);
        pthread_mutex_unlock(&d->ev_lock);
    }
    req_free(r);
    *con_cls = NULL;
    if (hc) {
        /* the next request on this connection starts its clock now */
        atomic_store(&hc->since_ns, util_now_ns());
        atomic_store(&hc->phase, CONN_HEADERS);
    }
}

static enum accel_err parse_listen(const char *listen, struct sockaddr_in *sa,
                                   char **cause)
{
    char host[64];
    const char *colon = strrchr(listen, ':');
    char *end;
    long port;

    if (colon == NULL || (size_t)(colon - listen) >= sizeof host) {
        *cause = xasprintf("--listen must be HOST:PORT (got \"%s\")", listen);
        return ACCEL_EINVAL;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535 || colon[1] == '\0') {
        *cause = xasprintf("--listen port must be 0-65535 (got \"%s\")",
                           colon + 1);
        return ACCEL_EINVAL;
    }
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0)
        util_strlcpy(host, "127.0.0.1", sizeof host);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        *cause = xasprintf("--listen host must be an IPv4 address (got "
                           "\"%s\")",
                           host);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

/* Connections the fd limit allows (raised to its hard maximum first):
 * keep 512 descriptors for the store, logs, apps and NVML. */
static unsigned conn_limit(void)
{
    struct rlimit rl;
    unsigned n = HTTP_MAX_CONNECTIONS;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 512;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < n + 512)
        n = rl.rlim_cur > 1024 ? (unsigned)rl.rlim_cur - 512 : 512;
    return n;
}

enum accel_err http_start(struct accel_daemon *d, const char *listen,
                          int *out_port, char **cause)
{
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;
    struct http_server *s;
    unsigned limit = conn_limit();
    unsigned per_peer = limit < HTTP_MAX_PER_PEER ? limit : HTTP_MAX_PER_PEER;

    if (parse_listen(listen, &sa, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    s = xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->conn_lock, NULL);
    d->http = s; /* on_connection reads it from the first accept */
    s->mhd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
            MHD_ALLOW_SUSPEND_RESUME,
        0, NULL, NULL, on_request, d, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_THREAD_POOL_SIZE,
        store_is_cluster(d->store) ? HTTP_THREADS_CLUSTER : HTTP_THREADS,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, d,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, d,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, request_line_begins, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_peer,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_END);
    if (s->mhd == NULL) {
        d->http = NULL;
        pthread_mutex_destroy(&s->conn_lock);
        free(s);
        *cause = xasprintf("cannot listen on %s (address in use or not "
                           "available)",
                           listen);
        return ACCEL_ESYS;
    }
    info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *out_port = info ? info->port : ntohs(sa.sin_port);
    s->waker_running = pthread_create(&s->waker, NULL, waker_main, d) == 0;
    log_info("http: %u connections at most (%u per client address), "
             "headers within %d s, bodies within %d s",
             limit, per_peer, HTTP_HEADER_DEADLINE_S, HTTP_BODY_DEADLINE_S);
    return ACCEL_OK;
}

enum accel_err http_check_hami(const char *listen, bool any, char **cause)
{
    struct sockaddr_in sa;
    if (parse_listen(listen, &sa, cause) != ACCEL_OK) {
        char *why = *cause;
        *cause = xasprintf("--hami-listen: %s", why);
        free(why);
        return ACCEL_EINVAL;
    }
    if (!any && (ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
        *cause = xasprintf("--hami-listen %s: the HAMi listener asks no "
                           "credentials, so it takes a loopback address "
                           "(127.0.0.0/8) only; add --hami-listen-any to "
                           "serve other addresses", listen);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

enum accel_err http_start_hami(struct accel_daemon *d, const char *listen,
                               bool any, int *out_port, char **cause)
{
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;
    struct http_server *s = d->http;

    if (s == NULL) {
        *cause = xstrdup("the HAMi listener starts after the API's");
        return ACCEL_EINVAL;
    }
    if (http_check_hami(listen, any, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    parse_listen(listen, &sa, cause);
    s->hami = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
            MHD_ALLOW_SUSPEND_RESUME,
        0, NULL, NULL, on_request_hami, d, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_THREAD_POOL_SIZE, 2u,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, d,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, d,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, 256u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u, MHD_OPTION_END);
    if (s->hami == NULL) {
        *cause = xasprintf("cannot listen on %s for --hami-listen (address "
                           "in use or not available)", listen);
        return ACCEL_ESYS;
    }
    info = MHD_get_daemon_info(s->hami, MHD_DAEMON_INFO_BIND_PORT);
    *out_port = info ? info->port : ntohs(sa.sin_port);
    log_info("HAMi-WebUI backend routes (read-only, no token) on %s", listen);
    return ACCEL_OK;
}

void http_stop(struct accel_daemon *d)
{
    if (d->http == NULL)
        return;
    if (d->http->hami)
        MHD_stop_daemon(d->http->hami); /* no request of it parks */
    d->stopping = 1;
    if (d->http->waker_running)
        pthread_join(d->http->waker, NULL);
    /* suspended connections must be resumed before the server stops;
     * dispatched again, they answer at once (d->stopping) */
    pthread_mutex_lock(&d->ev_lock);
    wake_all_locked(d);
    pthread_mutex_unlock(&d->ev_lock);
    MHD_stop_daemon(d->http->mhd);
    pthread_mutex_destroy(&d->http->conn_lock);
    free(d->http);
    d->http = NULL;
}
