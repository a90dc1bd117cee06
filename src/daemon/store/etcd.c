/* SPDX-License-Identifier: MIT */
/*
 * etcd.c: the etcd v3 client of etcd.h, spoken through etcd's JSON gateway
 * (grpc-gateway: one POST per call, JSON in and out, int64 fields as
 * decimal strings, bytes as base64). libcurl carries it; jansson reads and
 * writes the JSON. Foreign errors (curl codes, HTTP statuses, gRPC codes in
 * the gateway's error bodies) become enum accel_err here and nowhere else.
 *
 * What it is not: a general etcd client. No auth tokens, no gRPC, no watch
 * multiplexing (one stream per etcd_watch), no lease keepalive stream (one
 * renewal per call: the caller's timer decides when).
 *
 * Failover. A call goes to the member that answered last and moves on
 * through the list when that member cannot serve it. Sending a request
 * again elsewhere is only safe when the first member surely did not apply
 * it, or when applying it twice is harmless; so a request is marked
 * idempotent (reads, renewals, revocations, lease grants: a spare lease just
 * expires) or not (transactions that write, compaction). A request that was
 * never sent (connection refused) or that the member refused before
 * proposing it ("no leader", "leader changed") moves on either way; a
 * non-idempotent one whose answer was lost (timeout, reset after sending,
 * HTTP 503 "request timed out") stops with ACCEL_EIO: it may have applied,
 * and the caller re-reads (etcd.h).
 *
 * Threads: the handle keeps a small pool of curl easy handles under a
 * mutex; a call borrows one for its duration, so any number of calls may
 * run at once (each on its own connection). A watch has its own handle and
 * runs curl's multi interface in a loop that wakes every 100 ms to look at
 * the caller's stop flag: the easy interface's progress callback fires only
 * about once a second on an idle stream, too seldom for etcd.h's 200 ms.
 */
#include "common/accel_setup.h"
#include "daemon/store/etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/base64.h"
#include "common/dynbuf.h"
#include "common/util.h"

#define ETCD_MAX_ENDPOINTS 16           /* etcd.h's limit */
#define ETCD_URL_MAX       400          /* characters of one endpoint */
#define ETCD_POOL_MAX      8            /* idle curl handles kept for reuse */
#define ETCD_PAGE          1000         /* keys per range page */
#define ETCD_BODY_MAX      (256u << 20) /* largest answer or watch line */
#define ETCD_TIMEOUT_MS    5000         /* per request when opts say <= 0 */
#define ETCD_CONNECT_MS    2000         /* at most, per connection attempt */
#define ETCD_WATCH_POLL_MS 100          /* a watch looks at *stop this often */
#define ETCD_WATCH_DEAD_MS 2000         /* unanswered keepalive probes of a
                                           watch: the path is gone */

/* gRPC status codes that the gateway puts in its error bodies */
#define GRPC_DEADLINE_EXCEEDED   4
#define GRPC_NOT_FOUND           5
#define GRPC_PERMISSION_DENIED   7
#define GRPC_UNAVAILABLE         14
#define GRPC_UNAUTHENTICATED     16

struct etcd {
    char *urls[ETCD_MAX_ENDPOINTS]; /* "http://h:2379", no trailing slash */
    size_t nurls;                   /* how many */
    atomic_size_t current;          /* index of the member that answered last */
    char *cacert;                   /* CA file, or NULL */
    char *cert;                     /* client certificate, or NULL */
    char *key;                      /* its private key, or NULL */
    long timeout_ms;                /* per request (not watches) */
    struct curl_slist *headers;     /* read-only after etcd_open */
    pthread_mutex_t mu;             /* guards pool and npool */
    CURL *pool[ETCD_POOL_MAX];      /* idle easy handles */
    size_t npool;                   /* how many are idle */
};

/* ------------------------------------------------------------------ */
/* Small helpers: buffers, numbers, base64 in JSON                     */
/* ------------------------------------------------------------------ */

/* Answers and watch streams are read into dynbufs capped at
 * ETCD_BODY_MAX (STYLE 12; common/dynbuf.h). */
static void buf_init(struct dynbuf *b)
{
    dynbuf_init(b, ETCD_BODY_MAX);
}

/* curl's write callback for an answer: append, or stop the transfer. */
static size_t buf_write(char *data, size_t size, size_t nmemb, void *ud)
{
    size_t n = size * nmemb;
    return dynbuf_add(ud, data, n) ? n : 0;
}

/*
 * An int64 field of an answer: the gateway writes int64 as a JSON string
 * ("42"); a JSON integer is accepted too. Absent or null is 0 (proto3 omits
 * zero values). false when present and not a number.
 */
static bool json_i64(const json_t *obj, const char *name, int64_t *out)
{
    const json_t *v = json_object_get(obj, name);
    const char *s;
    char *end = NULL;
    long long n;

    if (v == NULL || json_is_null(v)) {
        *out = 0;
        return true;
    }
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    s = json_string_value(v);
    if (s == NULL || s[0] == '\0')
        return false;
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = (int64_t)n;
    return true;
}

/* The header's revision of an answer (0 when it has none). */
static int64_t header_revision(const json_t *doc)
{
    int64_t rev = 0;
    if (!json_i64(json_object_get(doc, "header"), "revision", &rev))
        return 0;
    return rev;
}

/* An int64 as the gateway wants it: a JSON string. */
static json_t *json_i64_new(int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return json_string(s);
}

/* n bytes as a base64 JSON string (new reference). */
static json_t *json_b64_new(const char *p, size_t n)
{
    char *enc = base64_encode(p, n);
    json_t *s = json_string(enc);
    free(enc);
    return s;
}

/*
 * A base64 field into a new NUL-terminated buffer: *out and *len; absent
 * is "" (proto3 omits empty bytes). false when it is not base64.
 */
static bool json_b64_get(const json_t *obj, const char *name, char **out,
                         size_t *len)
{
    const json_t *v = json_object_get(obj, name);
    if (v == NULL || json_is_null(v)) {
        *out = xstrdup("");
        *len = 0;
        return true;
    }
    if (!json_is_string(v))
        return false;
    return base64_decode(json_string_value(v), json_string_length(v), out, len);
}

/*
 * The end of the range of keys that start with key[0..len): the prefix
 * with its last byte incremented, after dropping trailing 0xff bytes (they
 * cannot be incremented). A prefix of only 0xff bytes, or the empty prefix,
 * has no such key: etcd's "\0" range end then means "every key from key
 * on". Returns a new buffer, its length in *out_len.
 */
static char *prefix_end(const char *key, size_t len, size_t *out_len)
{
    char *end;
    while (len > 0 && (unsigned char)key[len - 1] == 0xff)
        len--;
    if (len == 0) {
        end = xcalloc(1, 2);
        *out_len = 1;
        return end;
    }
    end = xmalloc(len + 1);
    memcpy(end, key, len);
    end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
    end[len] = '\0';
    *out_len = len;
    return end;
}

/*
 * Add the key (and for a prefix its range end) to a request object. etcd
 * refuses an empty key, so the empty prefix is written as key "\0" with
 * range end "\0": every key.
 */
static void json_set_range(json_t *req, const char *key, size_t len,
                           bool prefix)
{
    char *end;
    size_t end_len = 0;

    if (prefix && len == 0) {
        json_object_set_new(req, "key", json_b64_new("", 1));
        json_object_set_new(req, "range_end", json_b64_new("", 1));
        return;
    }
    json_object_set_new(req, "key", json_b64_new(key, len));
    if (!prefix)
        return;
    end = prefix_end(key, len, &end_len);
    json_object_set_new(req, "range_end", json_b64_new(end, end_len));
    free(end);
}

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
    if (kvs == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

/* One kv of an answer into *kv (its strings allocated); false if malformed
 * (then *kv holds nothing to free). */
static bool kv_parse(const json_t *o, struct etcd_kv *kv)
{
    memset(kv, 0, sizeof *kv);
    if (!json_is_object(o))
        return false;
    if (!json_i64(o, "create_revision", &kv->create_rev) ||
        !json_i64(o, "mod_revision", &kv->mod_rev) ||
        !json_i64(o, "version", &kv->version) ||
        !json_i64(o, "lease", &kv->lease))
        return false;
    if (!json_b64_get(o, "key", &kv->key, &kv->key_len))
        return false;
    if (!json_b64_get(o, "value", &kv->value, &kv->value_len)) {
        free(kv->key);
        kv->key = NULL;
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* Opening and closing                                                 */
/* ------------------------------------------------------------------ */

/*
 * One endpoint of the comma-separated list: s[0..len) with blanks around
 * it trimmed; a new string without trailing slashes, or NULL (and *cause)
 * when it is not an http:// or https:// URL with a host.
 */
static char *endpoint_parse(const char *s, size_t len, char **cause)
{
    char *url;

    while (len > 0 && (s[0] == ' ' || s[0] == '\t')) {
        s++;
        len--;
    }
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    while (len > 0 && s[len - 1] == '/')
        len--;
    if (!(len > 7 && strncmp(s, "http://", 7) == 0) &&
        !(len > 8 && strncmp(s, "https://", 8) == 0)) {
        *cause = xasprintf("etcd endpoint \"%.*s\" is not an http:// or "
                           "https:// URL with a host",
                           (int)len, s);
        return NULL;
    }
    if (len > ETCD_URL_MAX) {
        *cause = xasprintf("etcd endpoint \"%.40s...\" is longer than %d "
                           "characters",
                           s, ETCD_URL_MAX);
        return NULL;
    }
    url = xmalloc(len + 1);
    memcpy(url, s, len);
    url[len] = '\0';
    return url;
}

static enum accel_err endpoints_parse(struct etcd *e, const char *list,
                                      char **cause)
{
    const char *p = list;

    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (e->nurls == ETCD_MAX_ENDPOINTS) {
            *cause =
                xasprintf("more than %d etcd endpoints", ETCD_MAX_ENDPOINTS);
            return ACCEL_EINVAL;
        }
        e->urls[e->nurls] = endpoint_parse(p, len, cause);
        if (e->urls[e->nurls] == NULL)
            return ACCEL_EINVAL;
        e->nurls++;
        p += len + (comma ? 1 : 0);
    }
    if (e->nurls == 0) {
        *cause = xstrdup("no etcd endpoint given");
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static char *dup_or_null(const char *s)
{
    return s && s[0] ? xstrdup(s) : NULL;
}

/* Hand a sentence to the caller's *cause, or drop it when there is none. */
static void give_cause(char **cause, char *why)
{
    if (cause)
        *cause = why;
    else
        free(why);
}

/*
 * The headers of every request (NULL when out of memory). No "Expect:
 * 100-continue" round trip for large transactions. gRPC metadata
 * "hasleader" (the gateway passes Grpc-Metadata-* headers on): a member
 * that knows of no leader refuses at once with "no leader" instead of
 * holding a proposal until it times out, and ends a watch stream when it
 * loses its leader, so the caller moves to a member that has one.
 */
static struct curl_slist *request_headers(void)
{
    static const char *const lines[] = {
        "Content-Type: application/json",
        "Expect:",
        "Grpc-Metadata-hasleader: true",
    };
    struct curl_slist *h = NULL;

    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        struct curl_slist *more = curl_slist_append(h, lines[i]);
        if (more == NULL) {
            curl_slist_free_all(h);
            return NULL;
        }
        h = more;
    }
    return h;
}

/*
 * A file that curl will read for TLS: it must open for reading now, so a
 * wrong path is a sentence naming the flag at start, not a TLS error on
 * the first request.
 */
static enum accel_err check_readable(const char *flag, const char *path,
                                     char **cause)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        give_cause(cause, xasprintf("%s %s: cannot read it: %s", flag, path,
                                    strerror(errno)));
        return ACCEL_EINVAL;
    }
    close(fd);
    return ACCEL_OK;
}

/*
 * The client key is the cluster's credential: whoever reads it may write
 * every row under the prefix. It must be a regular file owned by root or
 * by this process's uid that neither group nor others may read or write
 * (mode 0600 or 0400), or the apps on this machine might take it.
 */
static enum accel_err check_key_file(const char *path, char **cause)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &sb) != 0) {
        give_cause(cause, xasprintf("--etcd-key %s: cannot read it: %s",
                                    path, strerror(errno)));
        if (fd >= 0)
            close(fd);
        return ACCEL_EINVAL;
    }
    close(fd);
    if (!S_ISREG(sb.st_mode)) {
        give_cause(cause, xasprintf("--etcd-key %s: not a regular file",
                                    path));
        return ACCEL_EINVAL;
    }
    if (sb.st_uid != 0 && sb.st_uid != geteuid()) {
        give_cause(cause, xasprintf(
            "--etcd-key %s is owned by uid %u: the client key must be "
            "owned by root or by acceld's uid (%u), or its owner could "
            "hand it to anyone (chown root %s)",
            path, (unsigned)sb.st_uid, (unsigned)geteuid(), path));
        return ACCEL_EINVAL;
    }
    if (sb.st_mode & 077) {
        give_cause(cause, xasprintf(
            "--etcd-key %s has mode %04o: the client key must not be "
            "readable or writable by group or others (0600 or 0400), or "
            "any app on this machine could write to etcd with it "
            "(chmod 600 %s)",
            path, (unsigned)(sb.st_mode & 07777), path));
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

/* The TLS files of o, before anything is set up. */
static enum accel_err check_tls_files(const struct etcd_opts *o,
                                      char **cause)
{
    bool cert = o->cert && o->cert[0], key = o->key && o->key[0];
    enum accel_err rc = ACCEL_OK;

    if (cert != key) {
        give_cause(cause, xstrdup(
            "--etcd-cert and --etcd-key go together: the client "
            "certificate needs its key (give both, or neither)"));
        return ACCEL_EINVAL;
    }
    if (o->cacert && o->cacert[0])
        rc = check_readable("--etcd-cacert", o->cacert, cause);
    if (rc == ACCEL_OK && cert)
        rc = check_readable("--etcd-cert", o->cert, cause);
    if (rc == ACCEL_OK && key)
        rc = check_key_file(o->key, cause);
    return rc;
}

/* A member to start at, drawn at random (the pid and the clock mixed, so
 * that agents started at the same moment on one machine differ too). */
static size_t spread_start(size_t n)
{
    uint64_t x = util_now_ns() ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33; /* splitmix64's finaliser */
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)(x % n);
}

enum accel_err etcd_open(const struct etcd_opts *o, struct etcd **out,
                         char **cause)
{
    struct etcd *e;
    enum accel_err rc;
    char *why = NULL;

    if (o == NULL || o->endpoints == NULL || out == NULL) {
        give_cause(cause, xstrdup("no etcd endpoints given"));
        return ACCEL_EINVAL;
    }
    rc = check_tls_files(o, cause);
    if (rc != ACCEL_OK)
        return rc;
    /* reference-counted, and thread-safe in the curl we build against */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        give_cause(cause, xstrdup("libcurl could not be initialised"));
        return ACCEL_EIO;
    }
    e = xcalloc(1, sizeof *e);
    pthread_mutex_init(&e->mu, NULL);
    atomic_init(&e->current, 0);
    e->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : ETCD_TIMEOUT_MS;
    e->cacert = dup_or_null(o->cacert);
    e->cert = dup_or_null(o->cert);
    e->key = dup_or_null(o->key);
    e->headers = request_headers();
    rc = e->headers ? endpoints_parse(e, o->endpoints, &why) : ACCEL_ENOMEM;
    if (rc != ACCEL_OK) {
        give_cause(cause, why ? why : xstrdup("out of memory"));
        etcd_close(e);
        return rc;
    }
    if (o->spread && e->nurls > 1)
        atomic_store(&e->current, spread_start(e->nurls));
    *out = e;
    return ACCEL_OK;
}

void etcd_close(struct etcd *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->npool; i++)
        curl_easy_cleanup(e->pool[i]);
    for (size_t i = 0; i < e->nurls; i++)
        free(e->urls[i]);
    curl_slist_free_all(e->headers);
    free(e->cacert);
    free(e->cert);
    free(e->key);
    pthread_mutex_destroy(&e->mu);
    free(e);
    curl_global_cleanup();
}

const char *etcd_endpoint(struct etcd *e)
{
    return e->urls[atomic_load(&e->current)];
}

/* ------------------------------------------------------------------ */
/* Is etcd closed to clients without credentials?                       */
/* ------------------------------------------------------------------ */

/* What a credential-less request to one member came to. */
enum probe {
    PROBE_CLOSED,  /* refused: TLS without a client certificate, or auth */
    PROBE_OPEN,    /* served: anyone on the machine could write */
    PROBE_UNKNOWN, /* no connection: this member cannot be judged now */
};

/*
 * POST a read of probe_key to member i with nothing that identifies us:
 * no client certificate, no key, and the member's certificate not checked
 * either (nothing secret is sent; the question is only whether it serves
 * strangers). An HTTP answer of any kind means the TLS handshake let us
 * in; only etcd's own auth refusing the read (PermissionDenied,
 * Unauthenticated) counts as closed then.
 */
static enum probe probe_member(struct etcd *e, size_t i,
                               const char *probe_key, char **detail)
{
    char url[ETCD_URL_MAX + 32];
    struct dynbuf body;
    enum probe res;
    long http = 0;
    CURLcode cc;
    json_t *req = json_object(), *doc;
    char *text;
    CURL *c = curl_easy_init();

    buf_init(&body);
    json_object_set_new(req, "key",
                        json_b64_new(probe_key, strlen(probe_key)));
    json_object_set_new(req, "count_only", json_true());
    text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (c == NULL || text == NULL) {
        if (c)
            curl_easy_cleanup(c);
        free(text);
        *detail = xstrdup("out of memory");
        return PROBE_UNKNOWN;
    }
    snprintf(url, sizeof url, "%s/v3/kv/range", e->urls[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, e->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_MS);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
        cc == CURLE_OPERATION_TIMEDOUT) {
        *detail = xstrdup(curl_easy_strerror(cc));
        res = PROBE_UNKNOWN;
    } else if (cc != CURLE_OK || http == 0) {
        /* the handshake failed or the connection was dropped: the member
         * wants a client certificate */
        *detail = xstrdup(curl_easy_strerror(cc));
        res = PROBE_CLOSED;
    } else {
        json_int_t code = 0;
        doc = body.p ? json_loads(body.p, 0, NULL) : NULL;
        if (doc)
            code = json_integer_value(json_object_get(doc, "code"));
        json_decref(doc);
        res = http == 401 || http == 403 || code == GRPC_PERMISSION_DENIED ||
                      code == GRPC_UNAUTHENTICATED
                  ? PROBE_CLOSED
                  : PROBE_OPEN;
        *detail = xasprintf("HTTP %ld", http);
    }
    curl_easy_cleanup(c);
    dynbuf_release(&body);
    free(text);
    return res;
}

enum accel_err etcd_check_closed(struct etcd *e, const char *probe_key,
                                 char **cause)
{
    char *unreached = NULL; /* the last member that could not be judged */
    size_t closed = 0;

    for (size_t i = 0; i < e->nurls; i++) {
        char *detail = NULL;
        enum probe p;

        if (strncmp(e->urls[i], "https://", 8) != 0) {
            give_cause(cause, xasprintf(
                "etcd endpoint %s is plain http: any process on a machine "
                "that reaches it (every app acceld runs among them) could "
                "rewrite the cluster's state; use https with client "
                "certificates (--etcd-cacert, --etcd-cert, --etcd-key; "
                "docs/cluster.md), or give --etcd-insecure to run so "
                "anyway",
                e->urls[i]));
            return ACCEL_EFORBIDDEN;
        }
        p = probe_member(e, i, probe_key, &detail);
        if (p == PROBE_OPEN) {
            give_cause(cause, xasprintf(
                "etcd endpoint %s answered a request made without a client "
                "certificate (%s): any process on a machine that reaches it "
                "(every app acceld runs among them) could rewrite the "
                "cluster's state; run etcd with --client-cert-auth and "
                "--trusted-ca-file (docs/cluster.md), or give "
                "--etcd-insecure to run so anyway",
                e->urls[i], detail));
            free(detail);
            free(unreached);
            return ACCEL_EFORBIDDEN;
        }
        if (p == PROBE_CLOSED) {
            closed++;
        } else {
            free(unreached);
            unreached = xasprintf("%s: %s", e->urls[i], detail);
        }
        free(detail);
    }
    if (closed == 0) {
        /* nothing judged: refuse rather than trust a member that comes up
         * a moment later (acceld exits; systemd starts it again) */
        give_cause(cause, xasprintf(
            "no etcd member answered, so none could be checked for client "
            "certificate authentication (%s)",
            unreached ? unreached : "no endpoints"));
        free(unreached);
        return ACCEL_EIO;
    }
    free(unreached);
    return ACCEL_OK;
}

/* ------------------------------------------------------------------ */
/* One request: the handle pool, one POST, what its outcome means      */
/* ------------------------------------------------------------------ */

static CURL *pool_take(struct etcd *e)
{
    CURL *c = NULL;
    pthread_mutex_lock(&e->mu);
    if (e->npool > 0)
        c = e->pool[--e->npool];
    pthread_mutex_unlock(&e->mu);
    return c ? c : curl_easy_init();
}

/* Keep c (and its live connection) for the next call, or let it go. */
static void pool_give(struct etcd *e, CURL *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->npool < ETCD_POOL_MAX) {
        e->pool[e->npool++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    if (c)
        curl_easy_cleanup(c);
}

/*
 * The options every POST to member i shares: URL, body, headers, TLS,
 * timeouts. timeout_ms 0 means none (a watch). curl_easy_reset keeps the
 * handle's live connections, so a reused handle still skips the connect.
 */
static void handle_setup(struct etcd *e, CURL *c, size_t i, const char *path,
                         const char *body, long timeout_ms)
{
    char url[ETCD_URL_MAX + 64]; /* + the longest path */

    snprintf(url, sizeof url, "%s%s", e->urls[i], path);
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms > 0 && timeout_ms < ETCD_CONNECT_MS
                         ? timeout_ms
                         : (long)ETCD_CONNECT_MS);
    if (e->cacert)
        curl_easy_setopt(c, CURLOPT_CAINFO, e->cacert);
    if (e->cert)
        curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
    if (e->key)
        curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
}

/* What one attempt at one member came to. */
enum outcome {
    OUT_OK,      /* an answer: *doc */
    OUT_REFUSED, /* etcd said no: the request is wrong or cannot be done */
    OUT_NEXT,    /* this member cannot serve it: try the next one */
    OUT_UNKNOWN, /* sent, no answer, not safe to send again */
};

/* One attempt's result (see attempt_judge). */
struct attempt {
    enum outcome out; /* what it came to */
    json_t *doc;      /* OUT_OK: the answer */
    int grpc_code;    /* OUT_REFUSED: etcd's gRPC status code */
    char *why;        /* otherwise: a sentence (allocated) */
};

/* Did the member say it cannot serve anything right now (no quorum)?
 * Such refusals come before a proposal, so nothing was applied. */
static bool msg_not_proposed(const char *msg)
{
    return strstr(msg, "no leader") != NULL ||
           strstr(msg, "leader changed") != NULL ||
           strstr(msg, "not capable") != NULL;
}

/* Did the member fail to serve it (rather than refuse it)? Timeouts on
 * the member's side come as 503, or as gRPC's Unknown with the context's
 * message when the gateway's own deadline struck first. */
static bool answer_unavailable(long http, json_int_t code, const char *msg)
{
    return http == 503 || code == GRPC_UNAVAILABLE ||
           code == GRPC_DEADLINE_EXCEEDED ||
           strstr(msg, "deadline exceeded") != NULL ||
           strstr(msg, "timed out") != NULL || msg_not_proposed(msg);
}

/*
 * An answer other than HTTP 200: the gateway's body is
 * {"error": msg, "message": msg, "code": grpc code}.
 */
static void judge_error_body(struct attempt *a, const char *url, long http,
                             const json_t *doc, bool idempotent)
{
    const char *msg = json_string_value(json_object_get(doc, "message"));
    json_int_t code = json_integer_value(json_object_get(doc, "code"));

    if (msg == NULL)
        msg = json_string_value(json_object_get(doc, "error"));
    if (msg == NULL)
        msg = "(no message)";
    a->why = xasprintf("%s answered HTTP %ld: %s", url, http, msg);
    a->grpc_code = (int)code;
    if (answer_unavailable(http, code, msg)) {
        a->out = idempotent || msg_not_proposed(msg) ? OUT_NEXT : OUT_UNKNOWN;
        return;
    }
    a->out = OUT_REFUSED;
}

/* A transfer that ended without an answer. */
static void judge_transport(struct attempt *a, CURL *c, const char *url,
                            CURLcode cc, bool idempotent)
{
    long sent = 0;

    curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &sent);
    a->why = xasprintf("%s: %s", url, curl_easy_strerror(cc));
    if (sent == 0 || cc == CURLE_COULDNT_CONNECT ||
        cc == CURLE_COULDNT_RESOLVE_HOST || idempotent)
        a->out = OUT_NEXT;
    else
        a->out = OUT_UNKNOWN;
}

/* Classify what one POST to member i produced. */
static void attempt_judge(struct attempt *a, CURL *c, const char *url,
                          CURLcode cc, struct dynbuf *b, bool idempotent)
{
    long http = 0;
    json_t *doc;

    memset(a, 0, sizeof *a);
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && b->toobig)) {
        judge_transport(a, c, url, cc, idempotent);
        return;
    }
    if (b->toobig) {
        a->out = OUT_REFUSED;
        a->grpc_code = -1;
        a->why =
            xasprintf("%s: answer larger than %u bytes", url, ETCD_BODY_MAX);
        return;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    doc = json_loadb(b->p ? b->p : "", b->len, 0, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        a->why = xasprintf("%s answered HTTP %ld without JSON", url, http);
        a->out = idempotent ? OUT_NEXT : OUT_UNKNOWN;
        return;
    }
    if (http != 200) {
        judge_error_body(a, url, http, doc, idempotent);
        json_decref(doc);
        return;
    }
    a->out = OUT_OK;
    a->doc = doc;
}

/* One POST of body to member i with borrowed handle c. */
static void attempt(struct etcd *e, CURL *c, size_t i, const char *path,
                    const char *body, bool idempotent, struct attempt *a)
{
    struct dynbuf b;
    CURLcode cc;

    buf_init(&b);
    handle_setup(e, c, i, path, body, e->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    cc = curl_easy_perform(c);
    attempt_judge(a, c, e->urls[i], cc, &b, idempotent);
    dynbuf_release(&b);
}

/* How a refusal maps onto accel's codes. */
static enum accel_err refusal_err(int grpc_code)
{
    if (grpc_code == -1)
        return ACCEL_ETOOBIG;
    if (grpc_code == GRPC_NOT_FOUND)
        return ACCEL_ENOTFOUND;
    return ACCEL_ESTORE;
}

/*
 * POST req (taken: its reference is dropped) to path, failing over through
 * the members from the one that answered last. ACCEL_OK with *out (the
 * answer, caller decrefs); ACCEL_ESTORE/ENOTFOUND/ETOOBIG when a member
 * refused it; ACCEL_EIO when no member answered. *cause (may be NULL) gets
 * a sentence on failure.
 */
static enum accel_err etcd_call(struct etcd *e, const char *path, json_t *req,
                                bool idempotent, json_t **out, char **cause)
{
    char *body = json_dumps(req, JSON_COMPACT);
    size_t first = atomic_load(&e->current);
    struct attempt a = { .out = OUT_NEXT };
    enum accel_err rc = ACCEL_EIO;
    CURL *c;

    json_decref(req);
    if (body == NULL)
        return ACCEL_ENOMEM;
    c = pool_take(e);
    if (c == NULL) {
        free(body);
        return ACCEL_ENOMEM;
    }
    for (size_t k = 0; k < e->nurls && a.out == OUT_NEXT; k++) {
        size_t i = (first + k) % e->nurls;
        free(a.why);
        attempt(e, c, i, path, body, idempotent, &a);
        if (a.out == OUT_OK || a.out == OUT_REFUSED)
            atomic_store(&e->current, i);
        /* a write this member may hold is not sent again, but the next
         * call should not wait on the same silent member (cut off, an
         * isolated old leader) when another may answer */
        else if (a.out == OUT_UNKNOWN)
            atomic_store(&e->current, (i + 1) % e->nurls);
    }
    pool_give(e, c);
    free(body);
    if (a.out == OUT_OK) {
        *out = a.doc;
        rc = ACCEL_OK;
    } else if (a.out == OUT_REFUSED) {
        rc = refusal_err(a.grpc_code);
    }
    if (rc != ACCEL_OK)
        give_cause(cause, a.why ? a.why : xstrdup("no etcd endpoint answered"));
    else
        free(a.why);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Range                                                               */
/* ------------------------------------------------------------------ */

/* A growing array of kvs. */
struct kv_vec {
    struct etcd_kv *v; /* elements */
    size_t n;          /* used */
    size_t cap;        /* allocated */
};

/* Append the answer's kvs to vec; false when one is malformed. */
static bool kvs_append(struct kv_vec *vec, const json_t *doc)
{
    const json_t *kvs = json_object_get(doc, "kvs");
    size_t i;
    const json_t *o;

    if (kvs != NULL && !json_is_array(kvs))
        return false;
    json_array_foreach (kvs, i, o) {
        if (vec->n == vec->cap) {
            vec->cap = vec->cap ? vec->cap * 2 : 16;
            vec->v = xrealloc(vec->v, vec->cap * sizeof *vec->v);
        }
        if (!kv_parse(o, &vec->v[vec->n]))
            return false;
        vec->n++;
    }
    return true;
}

/* The request for one page: from key[0..len) to the range's end. */
static json_t *range_req(const char *key, size_t len, const char *end,
                         size_t end_len, int64_t rev)
{
    json_t *req = json_object();
    json_object_set_new(req, "key", json_b64_new(key, len));
    if (end != NULL) {
        json_object_set_new(req, "range_end", json_b64_new(end, end_len));
        json_object_set_new(req, "limit", json_i64_new(ETCD_PAGE));
    }
    if (rev > 0)
        json_object_set_new(req, "revision", json_i64_new(rev));
    return req;
}

/*
 * Read pages until one says there is no more. The first page fixes the
 * revision (when the caller gave none) and every later one is read at it,
 * so keys written meanwhile never mix in. The next page starts just after
 * the last key read: that key with a NUL appended.
 */
static enum accel_err range_pages(struct etcd *e, char *from, size_t from_len,
                                  const char *end, size_t end_len, int64_t *rev,
                                  struct kv_vec *vec)
{
    for (;;) {
        json_t *doc = NULL;
        enum accel_err rc;
        bool more;
        const struct etcd_kv *last;

        rc = etcd_call(e, "/v3/kv/range",
                       range_req(from, from_len, end, end_len, *rev), true,
                       &doc, NULL);
        free(from);
        if (rc != ACCEL_OK)
            return rc;
        if (*rev == 0)
            *rev = header_revision(doc);
        more = json_is_true(json_object_get(doc, "more"));
        if (!kvs_append(vec, doc)) {
            json_decref(doc);
            return ACCEL_ESTORE;
        }
        json_decref(doc);
        if (!more || end == NULL || vec->n == 0)
            return ACCEL_OK;
        last = &vec->v[vec->n - 1];
        from = xcalloc(1, last->key_len + 2);
        memcpy(from, last->key, last->key_len);
        from_len = last->key_len + 1;
    }
}

enum accel_err etcd_get(struct etcd *e, const char *key, bool prefix,
                        int64_t rev, struct etcd_kv **out, size_t *n,
                        int64_t *header_rev)
{
    struct kv_vec vec = { 0 };
    size_t len, end_len = 0;
    char *from, *end = NULL;
    enum accel_err rc;

    if (e == NULL || key == NULL || out == NULL || n == NULL || rev < 0)
        return ACCEL_EINVAL;
    len = strlen(key);
    if (!prefix && len == 0)
        return ACCEL_EINVAL;
    if (prefix && len == 0) {
        from = xcalloc(1, 2); /* "\0" to "\0": every key */
        len = 1;
        end = xcalloc(1, 2);
        end_len = 1;
    } else {
        from = xmalloc(len + 1);
        memcpy(from, key, len + 1);
        if (prefix)
            end = prefix_end(key, len, &end_len);
    }
    rc = range_pages(e, from, len, end, end_len, &rev, &vec);
    free(end);
    if (rc != ACCEL_OK) {
        etcd_kvs_free(vec.v, vec.n);
        return rc;
    }
    *out = vec.v;
    *n = vec.n;
    if (header_rev)
        *header_rev = rev;
    return ACCEL_OK;
}

enum accel_err etcd_count(struct etcd *e, const char *prefix, int64_t rev,
                          int64_t min_mod, int64_t min_create,
                          int64_t *count)
{
    size_t len = prefix ? strlen(prefix) : 0, end_len = 0;
    char *end;
    json_t *req, *doc = NULL;
    enum accel_err rc;
    if (e == NULL || len == 0 || rev <= 0 || count == NULL)
        return ACCEL_EINVAL;
    end = prefix_end(prefix, len, &end_len);
    req = range_req(prefix, len, end, end_len, rev);
    free(end);
    json_object_del(req, "limit");
    /* etcd's count is of the whole range: the revision filters apply to
     * the keys it returns, not to count (count_only ignores them). With a
     * filter the keys alone come back, and they are counted here. */
    if (min_mod > 0 || min_create > 0)
        json_object_set_new(req, "keys_only", json_true());
    else
        json_object_set_new(req, "count_only", json_true());
    if (min_mod > 0)
        json_object_set_new(req, "min_mod_revision", json_i64_new(min_mod));
    if (min_create > 0)
        json_object_set_new(req, "min_create_revision",
                            json_i64_new(min_create));
    rc = etcd_call(e, "/v3/kv/range", req, true, &doc, NULL);
    if (rc != ACCEL_OK)
        return rc;
    *count = 0;
    if (min_mod > 0 || min_create > 0)
        *count = (int64_t)json_array_size(json_object_get(doc, "kvs"));
    else
        (void)json_i64(doc, "count", count); /* absent: 0 (proto3) */
    json_decref(doc);
    return ACCEL_OK;
}

/* ------------------------------------------------------------------ */
/* Transactions                                                        */
/* ------------------------------------------------------------------ */

static const char *const target_names[] = {
    [ETCD_MOD] = "MOD",
    [ETCD_CREATE] = "CREATE",
    [ETCD_VERSION] = "VERSION",
    [ETCD_VALUE] = "VALUE",
};
static const char *const target_fields[] = {
    [ETCD_MOD] = "mod_revision",
    [ETCD_CREATE] = "create_revision",
    [ETCD_VERSION] = "version",
    [ETCD_VALUE] = "value",
};
static const char *const result_names[] = {
    [ETCD_EQUAL] = "EQUAL",
    [ETCD_GREATER] = "GREATER",
    [ETCD_LESS] = "LESS",
    [ETCD_NOT_EQUAL] = "NOT_EQUAL",
};

static bool cmp_valid(const struct etcd_cmp *c)
{
    if (c->key == NULL || c->key[0] == '\0')
        return false;
    if ((unsigned)c->target > ETCD_VALUE ||
        (unsigned)c->result > ETCD_NOT_EQUAL)
        return false;
    return c->target != ETCD_VALUE || c->value != NULL || c->value_len == 0;
}

static bool op_valid(const struct etcd_op *o)
{
    if (o->key == NULL || (unsigned)o->kind > ETCD_DELETE_PREFIX)
        return false;
    if (o->key[0] == '\0' && o->kind != ETCD_DELETE_PREFIX)
        return false;
    return o->kind != ETCD_PUT || o->value != NULL || o->value_len == 0;
}

static json_t *cmp_json(const struct etcd_cmp *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "key", json_b64_new(c->key, strlen(c->key)));
    json_object_set_new(o, "target", json_string(target_names[c->target]));
    json_object_set_new(o, "result", json_string(result_names[c->result]));
    if (c->target == ETCD_VALUE)
        json_object_set_new(
            o, "value", json_b64_new(c->value ? c->value : "", c->value_len));
    else
        json_object_set_new(o, target_fields[c->target], json_i64_new(c->num));
    return o;
}

static json_t *op_json(const struct etcd_op *op)
{
    json_t *r = json_object();
    json_t *o = json_object();

    if (op->kind == ETCD_PUT) {
        json_object_set_new(r, "key", json_b64_new(op->key, strlen(op->key)));
        json_object_set_new(
            r, "value",
            json_b64_new(op->value ? op->value : "", op->value_len));
        if (op->lease != 0)
            json_object_set_new(r, "lease", json_i64_new(op->lease));
        json_object_set_new(o, "request_put", r);
        return o;
    }
    json_set_range(r, op->key, strlen(op->key), op->kind == ETCD_DELETE_PREFIX);
    json_object_set_new(o, "request_delete_range", r);
    return o;
}

/* Check the arguments before anything is sent; a sentence when wrong. */
static char *txn_check(const struct etcd_cmp *cmps, size_t ncmp,
                       const struct etcd_op *ops, size_t nops)
{
    if (nops > ETCD_TXN_MAX_OPS || ncmp > ETCD_TXN_MAX_OPS)
        return xasprintf("a transaction of %zu guards and %zu operations "
                         "exceeds etcd's limit of %d",
                         ncmp, nops, ETCD_TXN_MAX_OPS);
    if ((ncmp > 0 && cmps == NULL) || (nops > 0 && ops == NULL))
        return xstrdup("transaction arguments missing");
    for (size_t i = 0; i < ncmp; i++)
        if (!cmp_valid(&cmps[i]))
            return xasprintf("transaction guard %zu is malformed", i);
    for (size_t i = 0; i < nops; i++)
        if (!op_valid(&ops[i]))
            return xasprintf("transaction operation %zu is malformed", i);
    return NULL;
}

static json_t *txn_req(const struct etcd_cmp *cmps, size_t ncmp,
                       const struct etcd_op *ops, size_t nops)
{
    json_t *req = json_object();
    json_t *compare = json_array();
    json_t *success = json_array();

    for (size_t i = 0; i < ncmp; i++)
        json_array_append_new(compare, cmp_json(&cmps[i]));
    for (size_t i = 0; i < nops; i++)
        json_array_append_new(success, op_json(&ops[i]));
    json_object_set_new(req, "compare", compare);
    json_object_set_new(req, "success", success);
    return req;
}

enum accel_err etcd_txn(struct etcd *e, const struct etcd_cmp *cmps,
                        size_t ncmp, const struct etcd_op *ops, size_t nops,
                        bool *succeeded, int64_t *rev, char **cause)
{
    json_t *doc = NULL;
    enum accel_err rc;
    char *why;

    if (e == NULL || succeeded == NULL) {
        give_cause(cause, xstrdup("transaction arguments missing"));
        return ACCEL_EINVAL;
    }
    why = txn_check(cmps, ncmp, ops, nops);
    if (why != NULL) {
        give_cause(cause, why);
        return ACCEL_EINVAL;
    }
    /* a transaction that writes nothing may be asked again anywhere */
    rc = etcd_call(e, "/v3/kv/txn", txn_req(cmps, ncmp, ops, nops), nops == 0,
                   &doc, cause);
    if (rc != ACCEL_OK)
        return rc;
    *succeeded = json_is_true(json_object_get(doc, "succeeded"));
    if (rev)
        *rev = header_revision(doc);
    json_decref(doc);
    return ACCEL_OK;
}

enum accel_err etcd_compact(struct etcd *e, int64_t rev, char **cause)
{
    json_t *req, *doc = NULL;
    enum accel_err rc;

    if (e == NULL || rev <= 0) {
        give_cause(cause, xstrdup("compaction needs a revision above 0"));
        return ACCEL_EINVAL;
    }
    req = json_object();
    json_object_set_new(req, "revision", json_i64_new(rev));
    json_object_set_new(req, "physical", json_true());
    rc = etcd_call(e, "/v3/kv/compaction", req, false, &doc, cause);
    json_decref(doc);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Leases                                                              */
/* ------------------------------------------------------------------ */

/* The lease routes take one number, {field: v}: call route with it and
 * return the answer in *doc (caller frees). Idempotent for failover: a
 * grant sent twice leaves one spare lease that simply expires, and a
 * keepalive or revoke repeated means the same. */
static enum accel_err lease_call(struct etcd *e, const char *route,
                                 const char *field, int64_t v, json_t **doc)
{
    json_t *req = json_object();
    json_object_set_new(req, field, json_i64_new(v));
    return etcd_call(e, route, req, true, doc, NULL);
}

enum accel_err etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t *id)
{
    json_t *doc = NULL;
    enum accel_err rc;
    const char *err;

    if (e == NULL || ttl <= 0 || id == NULL)
        return ACCEL_EINVAL;
    rc = lease_call(e, "/v3/lease/grant", "TTL", ttl, &doc);
    if (rc != ACCEL_OK)
        return rc;
    err = json_string_value(json_object_get(doc, "error"));
    if ((err != NULL && err[0] != '\0') || !json_i64(doc, "ID", id) || *id == 0)
        rc = ACCEL_ESTORE;
    json_decref(doc);
    return rc;
}

/*
 * The keepalive route is a stream: its answer is {"result": {...}} or, when
 * the stream failed, {"error": {...}}. One request in, one answer out.
 */
enum accel_err etcd_lease_keepalive(struct etcd *e, int64_t id,
                                    int64_t *ttl_left)
{
    json_t *doc = NULL;
    const json_t *res;
    enum accel_err rc;

    if (e == NULL || id == 0 || ttl_left == NULL)
        return ACCEL_EINVAL;
    rc = lease_call(e, "/v3/lease/keepalive", "ID", id, &doc);
    if (rc != ACCEL_OK)
        return rc;
    res = json_object_get(doc, "result");
    if (!json_is_object(res))
        rc = json_object_get(doc, "error") ? ACCEL_EIO : ACCEL_ESTORE;
    else if (!json_i64(res, "TTL", ttl_left))
        rc = ACCEL_ESTORE;
    else if (*ttl_left < 0)
        *ttl_left = 0;
    json_decref(doc);
    return rc;
}

enum accel_err etcd_lease_revoke(struct etcd *e, int64_t id)
{
    json_t *doc = NULL;
    enum accel_err rc;

    if (e == NULL || id == 0)
        return ACCEL_EINVAL;
    rc = lease_call(e, "/v3/lease/revoke", "ID", id, &doc);
    json_decref(doc);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Members                                                             */
/* ------------------------------------------------------------------ */

/* One member as etcd_members shows it. */
static json_t *member_json(const json_t *m, const char *leader)
{
    const json_t *id = json_object_get(m, "ID");
    const json_t *name = json_object_get(m, "name");
    const json_t *urls = json_object_get(m, "clientURLs");
    const char *ids = json_is_string(id) ? json_string_value(id) : "";
    json_t *o = json_object();

    json_object_set_new(o, "id", json_string(ids));
    json_object_set_new(
        o, "name",
        json_string(json_is_string(name) ? json_string_value(name) : ""));
    json_object_set_new(o, "clientURLs",
                        json_is_array(urls) ? json_deep_copy(urls)
                                            : json_array());
    json_object_set_new(
        o, "leader",
        json_boolean(leader && ids[0] && strcmp(ids, leader) == 0));
    return o;
}

enum accel_err etcd_members(struct etcd *e, char **out)
{
    json_t *list = NULL, *status = NULL, *arr = NULL;
    const json_t *m;
    const char *leader;
    enum accel_err rc = ACCEL_EINVAL;
    size_t i;

    if (e == NULL || out == NULL)
        goto out;
    rc = etcd_call(e, "/v3/cluster/member/list", json_object(), true, &list,
                   NULL);
    if (rc != ACCEL_OK)
        goto out;
    /* the leader's id; none (all false) when no member knows one */
    if (etcd_call(e, "/v3/maintenance/status", json_object(), true, &status,
                  NULL) != ACCEL_OK)
        status = NULL;
    leader = json_string_value(json_object_get(status, "leader"));
    arr = json_array();
    json_array_foreach (json_object_get(list, "members"), i, m)
        json_array_append_new(arr, member_json(m, leader));
    *out = json_dumps(arr, JSON_COMPACT);
    rc = *out ? ACCEL_OK : ACCEL_ENOMEM;
out:
    json_decref(arr);
    json_decref(list);
    json_decref(status);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Watch                                                               */
/* ------------------------------------------------------------------ */

/* One watch stream's state, shared with curl's write callback. */
struct watch {
    etcd_watch_cb cb;      /* the caller's callback */
    etcd_watch_multi_cb mcb; /* or, for etcd_watch_multi, this one */
    void *ctx;             /* and its argument */
    size_t nranges;        /* watches on the stream (1 for etcd_watch) */
    int64_t *ids;          /* their watch_ids, in the order of the ranges
                              (etcd acknowledges them in that order) */
    size_t ncreated;       /* of which acknowledged */
    struct dynbuf line;       /* bytes received and not yet parsed */
    size_t scanned;        /* of which this many hold no newline */
    bool created;          /* it acknowledged the watch */
    bool done;             /* result is final: end the transfer */
    enum accel_err result; /* the watch's answer once done */
};

static void watch_end(struct watch *w, enum accel_err rc)
{
    if (!w->done) {
        w->done = true;
        w->result = rc;
    }
}

static void events_free(struct etcd_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ev[i].kv.key);
        free(ev[i].kv.value);
    }
    free(ev);
}

/* Decode a result's events; false when one is malformed. */
static bool events_parse(const json_t *arr, struct etcd_event **out, size_t *n)
{
    size_t cnt = json_array_size(arr), i;
    struct etcd_event *ev = xcalloc(cnt ? cnt : 1, sizeof *ev);
    const json_t *o;

    json_array_foreach (arr, i, o) {
        const char *type = json_string_value(json_object_get(o, "type"));
        ev[i].type =
            type && strcmp(type, "DELETE") == 0 ? ETCD_EV_DELETE : ETCD_EV_PUT;
        if (!kv_parse(json_object_get(o, "kv"), &ev[i].kv)) {
            events_free(ev, i);
            return false;
        }
    }
    *out = ev;
    *n = cnt;
    return true;
}

/*
 * Hand a result's events to the callback, one call per revision. etcd
 * sends a revision's events together and in the order the transaction
 * wrote them; one result may hold several revisions (a replay, a burst).
 */
/* The range (its place in etcd_watch_multi's list) of a response, by its
 * watch_id (the gateway leaves an id of 0 out); 0 for etcd_watch. */
static size_t watch_range(const struct watch *w, const json_t *res)
{
    int64_t id = 0;
    if (w->mcb == NULL)
        return 0;
    json_i64(res, "watch_id", &id);
    for (size_t i = 0; i < w->ncreated; i++)
        if (w->ids[i] == id)
            return i;
    return SIZE_MAX;
}

static enum accel_err watch_give(struct watch *w, size_t range, int64_t rev,
                                 const struct etcd_event *ev, size_t n)
{
    if (w->mcb)
        return w->mcb(w->ctx, range, rev, ev, n);
    return w->cb(w->ctx, rev, ev, n);
}

static void watch_events(struct watch *w, size_t range, const json_t *arr)
{
    struct etcd_event *ev = NULL;
    size_t n = 0, i = 0;

    if (!events_parse(arr, &ev, &n)) {
        watch_end(w, ACCEL_EIO);
        return;
    }
    while (i < n && !w->done) {
        size_t j = i + 1;
        enum accel_err rc;
        while (j < n && ev[j].kv.mod_rev == ev[i].kv.mod_rev)
            j++;
        rc = watch_give(w, range, ev[i].kv.mod_rev, &ev[i], j - i);
        if (rc != ACCEL_OK)
            watch_end(w, rc);
        i = j;
    }
    events_free(ev, n);
}

/*
 * One message of the stream: {"result": WatchResponse} or, when the
 * gateway's stream failed, {"error": ...}. A result is the creation
 * acknowledgement, a cancellation (compaction: the caller must reload),
 * events, or with none of these a progress notification.
 */
static void watch_message(struct watch *w, const json_t *doc)
{
    const json_t *res = json_object_get(doc, "result");
    const json_t *events;
    int64_t compact = 0;
    size_t range;

    if (!json_is_object(res)) {
        watch_end(w, ACCEL_EIO);
        return;
    }
    if (json_is_true(json_object_get(res, "canceled"))) {
        json_i64(res, "compact_revision", &compact);
        watch_end(w, compact > 0 ? ACCEL_ESTORE_CORRUPT : ACCEL_ESTORE);
        return;
    }
    if (json_is_true(json_object_get(res, "created"))) {
        int64_t id = 0;
        json_i64(res, "watch_id", &id);
        if (w->ids && w->ncreated < w->nranges)
            w->ids[w->ncreated] = id;
        w->ncreated++;
        w->created = w->ncreated >= w->nranges;
        return;
    }
    range = watch_range(w, res);
    if (range == SIZE_MAX) {
        watch_end(w, ACCEL_EIO); /* a watch this stream did not create */
        return;
    }
    events = json_object_get(res, "events");
    if (json_array_size(events) > 0) {
        watch_events(w, range, events);
        return;
    }
    {
        enum accel_err rc = watch_give(w, range, header_revision(res), NULL,
                                       0);
        if (rc != ACCEL_OK)
            watch_end(w, rc);
    }
}

static void watch_line(struct watch *w, const char *p, size_t len)
{
    json_t *doc = json_loadb(p, len, 0, NULL);

    if (!json_is_object(doc))
        watch_end(w, ACCEL_EIO);
    else
        watch_message(w, doc);
    json_decref(doc);
}

/*
 * Parse every complete line held; keep the incomplete tail (an object
 * split across chunks) for the next call. Newlines cannot occur inside the
 * gateway's JSON (strings escape them), so a newline ends a message.
 */
static void watch_drain(struct watch *w)
{
    size_t start = 0;

    if (w->line.len == 0)
        return;
    while (!w->done) {
        char *base = w->line.p + start;
        size_t from = w->scanned > start ? w->scanned - start : 0;
        char *nl = memchr(base + from, '\n', w->line.len - start - from);
        if (nl == NULL)
            break;
        if (nl > base)
            watch_line(w, base, (size_t)(nl - base));
        start += (size_t)(nl - base) + 1;
    }
    memmove(w->line.p, w->line.p + start, w->line.len - start);
    w->line.len -= start;
    w->scanned = w->line.len;
    if (w->line.p)
        w->line.p[w->line.len] = '\0';
}

static size_t watch_write(char *data, size_t size, size_t nmemb, void *ud)
{
    struct watch *w = ud;
    size_t n = size * nmemb;

    if (w->done)
        return 0;
    if (!dynbuf_add(&w->line, data, n)) {
        watch_end(w, ACCEL_EIO);
        return 0;
    }
    watch_drain(w);
    return w->done ? 0 : n;
}

static char *watch_body(const char *prefix, int64_t start_rev)
{
    json_t *create = json_object();
    json_t *req = json_object();
    char *body;

    json_set_range(create, prefix, strlen(prefix), true);
    if (start_rev > 0)
        json_object_set_new(create, "start_revision", json_i64_new(start_rev));
    json_object_set_new(create, "progress_notify", json_true());
    json_object_set_new(req, "create_request", create);
    body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return body;
}

/* Several create requests, one after the other in one body: the gateway
 * reads them in turn and carries their watches on the one stream. */
static char *watch_bodies(const char *const *prefixes, const int64_t *starts,
                          size_t n)
{
    struct dynbuf b;
    buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        char *one = watch_body(prefixes[i], starts[i]);
        if (one == NULL || !dynbuf_add(&b, one, strlen(one)) ||
            !dynbuf_add(&b, "\n", 1)) {
            free(one);
            dynbuf_release(&b);
            return NULL;
        }
        free(one);
    }
    return b.p;
}

/*
 * Has the caller asked the watch to stop? etcd.h's flag is a volatile int
 * that another thread sets; read it atomically so that the two threads do
 * not race (the setter may store plainly or with __atomic_store_n).
 */
static bool stop_requested(volatile int *stop)
{
    return stop != NULL && __atomic_load_n(stop, __ATOMIC_ACQUIRE) != 0;
}

/*
 * Run the transfer until it ends, the stream decides (w->done), or *stop.
 * Waits at most ETCD_WATCH_POLL_MS at a time for data.
 */
static enum accel_err watch_loop(CURLM *m, struct watch *w, volatile int *stop)
{
    int running = 1;

    for (;;) {
        if (stop_requested(stop))
            return ACCEL_OK;
        if (curl_multi_perform(m, &running) != CURLM_OK)
            return ACCEL_EIO;
        if (w->done)
            return w->result;
        if (running == 0)
            return ACCEL_EIO; /* the stream ended or broke */
        if (curl_multi_poll(m, NULL, 0, ETCD_WATCH_POLL_MS, NULL) != CURLM_OK)
            return ACCEL_EIO;
    }
}

/*
 * A member cut off by the network (no reset, no FIN: a pulled cable, a
 * partition) leaves its watch stream silent, and the view behind it stops
 * without a word: curl's keepalive alone (9 probes) would notice only after
 * ~23 s, long after the lease of a node whose loss the view then hides.
 * Probes every second, and TCP_USER_TIMEOUT ends the connection when they go
 * unanswered ETCD_WATCH_DEAD_MS: the stream breaks within ~3 s of the path.
 */
static int watch_sockopt(void *ctx, curl_socket_t fd, curlsocktype purpose)
{
    int one = 1, count = 2;
    unsigned int dead = ETCD_WATCH_DEAD_MS;

    (void)ctx;
    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKOPT_OK;
    /* best effort: without them the stream still ends, only later */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &dead, sizeof dead);
    return CURL_SOCKOPT_OK;
}

/* One watch stream on member i. */
static enum accel_err watch_on(struct etcd *e, size_t i, const char *body,
                               struct watch *w, volatile int *stop)
{
    CURL *c = curl_easy_init();
    CURLM *m = curl_multi_init();
    enum accel_err rc = ACCEL_ENOMEM;

    if (c == NULL || m == NULL)
        goto out;
    handle_setup(e, c, i, "/v3/watch", body, 0);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
    /* a member that vanishes without a reset is noticed within seconds */
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, watch_sockopt);
    if (curl_multi_add_handle(m, c) != CURLM_OK)
        goto out;
    rc = watch_loop(m, w, stop);
    curl_multi_remove_handle(m, c);
    /* a stream that broke leaves its member suspect (cut off, it would
     * stall the resumed watch on its connect timeout): the resumed watch,
     * and the next requests, start from the next member */
    if (w->created)
        atomic_store(&e->current, rc == ACCEL_EIO && !stop_requested(stop)
                                      ? (i + 1) % e->nurls : i);
out:
    if (m)
        curl_multi_cleanup(m);
    if (c)
        curl_easy_cleanup(c);
    return rc;
}

/* The stream of body (nranges watches) on the members in turn. */
static enum accel_err watch_run(struct etcd *e, char *body, size_t nranges,
                                etcd_watch_cb cb, etcd_watch_multi_cb mcb,
                                void *ctx, volatile int *stop);

enum accel_err etcd_watch(struct etcd *e, const char *prefix, int64_t start_rev,
                          etcd_watch_cb cb, void *ctx, volatile int *stop)
{
    if (e == NULL || prefix == NULL || cb == NULL || start_rev < 0)
        return ACCEL_EINVAL;
    return watch_run(e, watch_body(prefix, start_rev), 1, cb, NULL, ctx,
                     stop);
}

enum accel_err etcd_watch_multi(struct etcd *e, const char *const *prefixes,
                                const int64_t *start_revs, size_t n,
                                etcd_watch_multi_cb cb, void *ctx,
                                volatile int *stop)
{
    if (e == NULL || prefixes == NULL || start_revs == NULL || n == 0 ||
        cb == NULL)
        return ACCEL_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (prefixes[i] == NULL || start_revs[i] < 0)
            return ACCEL_EINVAL;
    return watch_run(e, watch_bodies(prefixes, start_revs, n), n, NULL, cb,
                     ctx, stop);
}

static enum accel_err watch_run(struct etcd *e, char *body, size_t nranges,
                                etcd_watch_cb cb, etcd_watch_multi_cb mcb,
                                void *ctx, volatile int *stop)
{
    size_t first;
    enum accel_err rc = ACCEL_EIO;
    int64_t *ids;

    if (body == NULL)
        return ACCEL_ENOMEM;
    ids = xcalloc(nranges, sizeof(*ids));
    first = atomic_load(&e->current);
    /* move on only from a member that never acknowledged the watch: once
     * events may have reached the callback, the caller decides where to
     * resume */
    for (size_t k = 0; k < e->nurls; k++) {
        struct watch w = {.cb = cb, .mcb = mcb, .ctx = ctx,
                          .nranges = nranges, .ids = ids};
        buf_init(&w.line);
        rc = watch_on(e, (first + k) % e->nurls, body, &w, stop);
        dynbuf_release(&w.line);
        if (rc != ACCEL_EIO || w.created || stop_requested(stop))
            break;
    }
    free(ids);
    free(body);
    return rc;
}
