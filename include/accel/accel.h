/* SPDX-License-Identifier: MIT */
/*
 * accel.h: what more than one artifact needs: the error list, accelerator
 * types and sharing modes, and protocol constants. No daemon state here.
 */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * XX(NAME, "machine-name", "message", http_status). Append only: never reuse
 * or renumber a code (the machine name is part of the API).
 */
#define ACCEL_ERR_MAP(XX)                                                      \
    XX(OK, "ok", "success", 200)                                               \
    XX(EINVAL, "invalid-argument", "invalid argument", 400)                    \
    XX(ENOMEM, "out-of-memory", "out of memory", 500)                          \
    XX(ENOTFOUND, "not-found", "not found", 404)                               \
    XX(EEXIST, "already-exists", "already exists", 409)                        \
    XX(ECONFLICT, "conflict", "conflict", 409)                                 \
    XX(EUNAUTH, "unauthorized", "missing or invalid token", 401)               \
    XX(EFORBIDDEN, "forbidden", "not allowed", 403)                            \
    XX(ETOOBIG, "too-large", "request body too large", 413)                    \
    XX(EIO, "io-error", "input/output error", 500)                             \
    XX(ESTORE, "store-error", "state store error", 500)                        \
    XX(ESTORE_NEWER, "store-newer", "database written by a newer accel", 500)  \
    XX(ESTORE_CORRUPT, "store-corrupt", "database is corrupt", 500)            \
    XX(ECHECK, "check-failed", "admission check failed", 422)                  \
    XX(EMETHOD, "method-not-allowed", "method not allowed", 405)               \
    XX(ERANGE, "out-of-range", "value out of range", 400)                      \
    XX(EPARSE, "parse-error", "malformed input", 400)                          \
    XX(EMEDIA, "unsupported-media-type", "unsupported media type", 415)        \
    XX(EBUSY, "busy", "resource busy", 409)                                    \
    XX(ESYS, "system-error", "system call failed", 500)                        \
    XX(ENOTSUP, "not-supported", "not supported", 400)                         \
    XX(EUNAVAIL, "store-unavailable", "the cluster store did not answer", 503)

enum accel_err {
#define ACCEL_ERR_ENUM_(name, str, msg, http) ACCEL_##name,
    ACCEL_ERR_MAP(ACCEL_ERR_ENUM_)
#undef ACCEL_ERR_ENUM_
    ACCEL_ERR_COUNT
};

/* A sentence for the code; never NULL. */
const char *accel_strerror(enum accel_err err);
/* The stable machine name used in JSON bodies ("not-found"); never NULL. */
const char *accel_err_name(enum accel_err err);
/* The HTTP status that a request failing with this code answers. */
int accel_err_http_status(enum accel_err err);

/* Accelerator types (SPEC 1). The order is the canonical order. */
#define ACCEL_TYPE_MAP(XX)                                                     \
    XX(NVIDIA, "nvidia", "NVIDIA GPU", 1)                                      \
    XX(NVIDIA_GB10, "nvidia-gb10", "NVIDIA GB10", 0)                           \
    XX(APPLE_M, "apple-m", "Apple Silicon-M", 0)                               \
    XX(AMD, "amd", "AMD", 0)                                                   \
    XX(INTEL, "intel", "Intel", 0)                                             \
    XX(INTEL_GPU, "intel-gpu", "Intel GPU", 1)                                 \
    XX(AMD_GPU, "amd-gpu", "AMD GPU", 1)                                       \
    XX(MOORE_SOC, "moore-soc", "Moore Threads", 0)                             \
    XX(CPU, "cpu", "CPU", 0)

enum accel_type {
#define ACCEL_TYPE_ENUM_(name, str, title, vram) ACCEL_TYPE_##name,
    ACCEL_TYPE_MAP(ACCEL_TYPE_ENUM_)
#undef ACCEL_TYPE_ENUM_
    ACCEL_TYPE_COUNT
};

/* Sharing modes, in their legacy code order ("0", "1", "2"). */
enum accel_support {
    ACCEL_SUPPORT_EXCLUSIVE = 0, /* App exclusive */
    ACCEL_SUPPORT_MEMSLICE = 1,  /* Memory slicing */
    ACCEL_SUPPORT_TIMESLICE = 2, /* Time slicing */
    ACCEL_SUPPORT_COUNT
};

/* "nvidia" → type; accepts "strix-halo" and "amd-apu" for amd. false if unknown. */
bool accel_type_parse(const char *s, enum accel_type *out);
const char *accel_type_name(enum accel_type t);
const char *accel_type_title(enum accel_type t);
/* Does the type have dedicated VRAM (nvidia, intel-gpu, amd-gpu)? */
bool accel_type_has_vram(enum accel_type t);
/* May the type's devices overcommit and its apps give memory back
 * (elastic memory, SPEC 4.4)? The types with VRAM of their own, whose
 * driver counts the card's free memory (NVML, the amdgpu sysfs), and the
 * AMD APU (amd: its carve-out and GTT, which amdgpu counts, held by the
 * shim's HIP hooks; issue 46). */
bool accel_type_elastic(enum accel_type t);
/*
 * The modes a type allows, first = default. Writes up to 3 into out and
 * returns how many.
 */
size_t accel_type_modes(enum accel_type t, enum accel_support out[3]);
bool accel_type_allows(enum accel_type t, enum accel_support s);

/* "Exclusive" / "MemorySlice" / "TimeSlice"; also accepts "0"/"1"/"2". */
bool accel_support_parse(const char *s, enum accel_support *out);
const char *accel_support_name(enum accel_support s);
const char *accel_support_code(enum accel_support s);  /* "0" "1" "2" */
const char *accel_support_label(enum accel_support s); /* "App exclusive" */

#define ACCEL_DEFAULT_LISTEN "127.0.0.1:7390"
#define ACCEL_MAX_BODY (1024 * 1024) /* SPEC 5: bodies above get 413 */
#define ACCEL_NAME_MAX 63            /* app and user names */
#define ACCEL_ID_MAX 127             /* device ids */
#define ACCEL_SHARED_OWNER "shared"

/* App and user names: [a-z0-9]([-a-z0-9]*[a-z0-9])?, 1..63 chars. */
bool accel_name_valid(const char *s);

#endif /* ACCEL_ACCEL_H */
