/* SPDX-License-Identifier: MIT */
/*
 * etcd.h: a small client of etcd's v3 API (SPEC 10) through its JSON
 * gateway (POST /v3/kv/range, /v3/kv/txn, /v3/watch, /v3/lease/...) over
 * libcurl, which acceld already links. Keys and values are byte strings
 * (base64 on the wire); this client hands them out NUL-terminated with
 * their length.
 *
 * Endpoints are tried in order; a transport failure (refused, reset,
 * timeout) or an answer that the member cannot serve ("leader changed",
 * "no leader", HTTP 503) moves to the next one, and the one that answered
 * last is tried first next time. TLS when the URLs are https: the CA file
 * checks the members, the cert and key are the client certificate.
 * One refinement for requests that write (a transaction with operations,
 * a compaction): they move on only when the member surely did not apply
 * them (no connection, nothing sent, "no leader"/"leader changed"); after
 * a timeout, a reset once sent, or a 503 "request timed out" they answer
 * ACCEL_EIO at once, since sending them again could apply them twice.
 *
 * Thread-safe: every call may run on any thread at once (each takes a curl
 * handle of its own from a small pool). A watch blocks its caller's thread.
 *
 * Errors: ACCEL_EIO (no endpoint answered), ACCEL_ESTORE (etcd refused the
 * request: the message is in *cause when the call has one), ACCEL_EINVAL,
 * ACCEL_ENOMEM, ACCEL_ENOTFOUND (etcd's NotFound: a lease that is gone),
 * ACCEL_ETOOBIG (an answer above 256 MiB).
 */
#ifndef ACCEL_DAEMON_STORE_ETCD_H
#define ACCEL_DAEMON_STORE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

struct etcd;

struct etcd_opts {
    const char *endpoints; /* "http://h1:2379,http://h2:2379" */
    const char *cacert;    /* PEM file, or NULL */
    const char *cert;      /* client certificate PEM, or NULL */
    const char *key;       /* its private key PEM, or NULL: a regular file
                            * owned by root or this uid, mode 0600/0400,
                            * or etcd_open refuses it (ACCEL_EINVAL) */
    int timeout_ms;        /* per request (not watches); <= 0: 5000 */
    bool spread;           /* start at a random member, not the first:
                            * the agents of a cluster list the members in
                            * the same order, and would all load the first
                            * (failover then goes on in the list's order) */
};

/* Parse the endpoints (each http:// or https://, at most 16) and set up;
 * contacts nothing. *cause gets an allocated sentence on failure. */
enum accel_err etcd_open(const struct etcd_opts *o, struct etcd **out,
                         char **cause);
void etcd_close(struct etcd *e); /* accepts NULL */

/*
 * Is etcd closed to whoever lacks the client credentials? Every endpoint
 * must be https, and every member that can be reached must refuse a read
 * of probe_key sent without a client certificate (a failed TLS handshake,
 * or etcd's auth refusing it). ACCEL_EFORBIDDEN with a sentence in *cause
 * naming the endpoint otherwise. A member that cannot be reached now is
 * not judged; when none can be, ACCEL_EIO (nothing was checked).
 */
enum accel_err etcd_check_closed(struct etcd *e, const char *probe_key,
                                 char **cause);

/* The member that answered last ("http://127.0.0.1:2379"); valid until
 * etcd_close. */
const char *etcd_endpoint(struct etcd *e);

struct etcd_kv {
    char *key;           /* NUL-terminated */
    size_t key_len;
    char *value;         /* NUL-terminated; "" for a delete event */
    size_t value_len;
    int64_t create_rev;
    int64_t mod_rev;
    int64_t version;
    int64_t lease;
};

/* Free an array of n kvs (and each one's strings). */
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/*
 * Read one key (prefix false) or every key that starts with key (prefix
 * true), in key order, at revision rev (0: the newest). *out, *n get the
 * kvs (caller frees with etcd_kvs_free), *header_rev (may be NULL) the
 * store's revision the answer was read at. Large prefixes are read in
 * pages of 1000 at one revision, so the answer is one consistent view.
 * A compacted rev is ACCEL_ESTORE.
 */
enum accel_err etcd_get(struct etcd *e, const char *key, bool prefix,
                        int64_t rev, struct etcd_kv **out, size_t *n,
                        int64_t *header_rev);

/*
 * How many keys start with prefix at revision rev (> 0), counting only
 * those whose mod revision is at least min_mod and whose create revision
 * is at least min_create (0: any). *count gets it. A compacted rev is
 * ACCEL_ESTORE.
 */
enum accel_err etcd_count(struct etcd *e, const char *prefix, int64_t rev,
                          int64_t min_mod, int64_t min_create,
                          int64_t *count);

enum etcd_target { ETCD_MOD, ETCD_CREATE, ETCD_VERSION, ETCD_VALUE };
enum etcd_result { ETCD_EQUAL, ETCD_GREATER, ETCD_LESS, ETCD_NOT_EQUAL };

/* One guard of a transaction: key's target compared with num (or value).
 * A key that does not exist has mod, create and version 0. */
struct etcd_cmp {
    const char *key;
    enum etcd_target target;
    enum etcd_result result;
    int64_t num;          /* MOD, CREATE, VERSION */
    const char *value;    /* VALUE */
    size_t value_len;
};

enum etcd_op_kind { ETCD_PUT, ETCD_DELETE, ETCD_DELETE_PREFIX };

struct etcd_op {
    enum etcd_op_kind kind;
    const char *key;
    const char *value;    /* PUT */
    size_t value_len;
    int64_t lease;        /* PUT: attach to this lease, 0 = none */
};

/*
 * One transaction: if every guard holds, apply ops (in order) and
 * *succeeded = true; else apply nothing and *succeeded = false (not an
 * error). *rev (may be NULL) gets the revision after the transaction
 * (success) or the one the guards were checked at (failure). A failure to
 * get an answer (ACCEL_EIO) leaves unknown whether it applied; the caller
 * re-reads. etcd's limit is 128 operations per transaction (--max-txn-ops):
 * more is ACCEL_EINVAL here, before sending.
 */
enum accel_err etcd_txn(struct etcd *e, const struct etcd_cmp *cmps,
                        size_t ncmp, const struct etcd_op *ops, size_t nops,
                        bool *succeeded, int64_t *rev, char **cause);
#define ETCD_TXN_MAX_OPS 128

/* Compact the store's history up to rev (etcd's physical compaction: it
 * returns once done). Later reads at or watches from a revision below rev
 * answer ACCEL_ESTORE / ACCEL_ESTORE_CORRUPT. A rev already compacted is
 * ACCEL_ESTORE with etcd's message in *cause (may be NULL). */
enum accel_err etcd_compact(struct etcd *e, int64_t rev, char **cause);

/* Leases: grant (ttl seconds; *id gets the lease), renew once (*ttl_left
 * gets the seconds left; 0 means the lease had expired and is gone), and
 * revoke (its keys are deleted; ACCEL_ENOTFOUND when the lease had already
 * expired or been revoked). */
enum accel_err etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t *id);
enum accel_err etcd_lease_keepalive(struct etcd *e, int64_t id,
                                    int64_t *ttl_left);
enum accel_err etcd_lease_revoke(struct etcd *e, int64_t id);

enum etcd_ev_type { ETCD_EV_PUT, ETCD_EV_DELETE };

struct etcd_event {
    enum etcd_ev_type type;
    struct etcd_kv kv;    /* the key as it is after the event (a delete:
                             key and mod_rev set, value "") */
};

/*
 * Watch every key under prefix from revision start_rev (inclusive) and call
 * cb once per revision, with that revision's events in the order the
 * transaction wrote them. Progress notifications (every few seconds when
 * nothing changes) call cb with n = 0 and rev = the store's revision. Runs
 * on the caller's thread until cb returns non-OK (returned), *stop becomes
 * nonzero (ACCEL_OK; checked at least every 200 ms, read with
 * __atomic_load_n: another thread sets it, best with __atomic_store_n so
 * that ThreadSanitizer sees no race), the revision was
 * compacted (ACCEL_ESTORE_CORRUPT: the caller reloads), or the stream
 * breaks (ACCEL_EIO: the caller watches again from the revision after the
 * last one it got, perhaps on another endpoint). The events and their
 * strings are valid only during the callback.
 */
typedef enum accel_err (*etcd_watch_cb)(void *ctx, int64_t rev,
                                        const struct etcd_event *ev,
                                        size_t n);
enum accel_err etcd_watch(struct etcd *e, const char *prefix,
                          int64_t start_rev, etcd_watch_cb cb, void *ctx,
                          volatile int *stop);

/*
 * Several prefixes watched on one stream (one create request each, in one
 * body: etcd's JSON gateway takes them in turn and tells their answers
 * apart by watch_id), prefix i from start_revs[i]. As etcd_watch, but cb
 * also gets the place (range) of the prefix the events or the progress
 * notification are for. Each watch keeps its own pace: a revision may
 * reach one watch before another (a watch still catching up), so a
 * caller that needs "everything up to rev" tracks each range's own.
 */
typedef enum accel_err (*etcd_watch_multi_cb)(void *ctx, size_t range,
                                              int64_t rev,
                                              const struct etcd_event *ev,
                                              size_t n);
enum accel_err etcd_watch_multi(struct etcd *e, const char *const *prefixes,
                                const int64_t *start_revs, size_t n,
                                etcd_watch_multi_cb cb, void *ctx,
                                volatile int *stop);

/* The member list as etcd reports it (for `accelctl cluster` and logs):
 * *out gets an allocated JSON array text [{name, clientURLs, leader}]. */
enum accel_err etcd_members(struct etcd *e, char **out);

#endif /* ACCEL_DAEMON_STORE_ETCD_H */
