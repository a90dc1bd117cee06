/* SPDX-License-Identifier: MIT */
/*
 * accel.c: the tables behind include/accel/accel.h, generated from the
 * X-macro lists so names, messages and statuses cannot drift apart.
 */
#include "accel/accel.h"

#include <string.h>

static const struct {
    const char *name;
    const char *msg;
    int http;
} err_table[] = {
#define ERR_ROW_(n, s, m, h) {s, m, h},
    ACCEL_ERR_MAP(ERR_ROW_)
#undef ERR_ROW_
};

const char *accel_strerror(enum accel_err err)
{
    if ((unsigned)err >= ACCEL_ERR_COUNT)
        return "unknown error";
    return err_table[err].msg;
}

const char *accel_err_name(enum accel_err err)
{
    if ((unsigned)err >= ACCEL_ERR_COUNT)
        return "unknown";
    return err_table[err].name;
}

int accel_err_http_status(enum accel_err err)
{
    if ((unsigned)err >= ACCEL_ERR_COUNT)
        return 500;
    return err_table[err].http;
}

static const struct {
    const char *name;
    const char *title;
    bool vram;
} type_table[] = {
#define TYPE_ROW_(n, s, t, v) {s, t, v},
    ACCEL_TYPE_MAP(TYPE_ROW_)
#undef TYPE_ROW_
};

bool accel_type_parse(const char *s, enum accel_type *out)
{
    if (s == NULL)
        return false;
    if (strcmp(s, "strix-halo") == 0 || strcmp(s, "amd-apu") == 0) {
        *out = ACCEL_TYPE_AMD;
        return true;
    }
    for (int i = 0; i < ACCEL_TYPE_COUNT; i++) {
        if (strcmp(s, type_table[i].name) == 0) {
            *out = (enum accel_type)i;
            return true;
        }
    }
    return false;
}

const char *accel_type_name(enum accel_type t)
{
    return (unsigned)t < ACCEL_TYPE_COUNT ? type_table[t].name : "unknown";
}

const char *accel_type_title(enum accel_type t)
{
    return (unsigned)t < ACCEL_TYPE_COUNT ? type_table[t].title : "Unknown";
}

bool accel_type_has_vram(enum accel_type t)
{
    return (unsigned)t < ACCEL_TYPE_COUNT && type_table[t].vram;
}

bool accel_type_elastic(enum accel_type t)
{
    return accel_type_has_vram(t) || t == ACCEL_TYPE_AMD;
}

size_t accel_type_modes(enum accel_type t, enum accel_support out[3])
{
    switch (t) {
    case ACCEL_TYPE_NVIDIA:
        out[0] = ACCEL_SUPPORT_TIMESLICE;
        out[1] = ACCEL_SUPPORT_MEMSLICE;
        out[2] = ACCEL_SUPPORT_EXCLUSIVE;
        return 3;
    case ACCEL_TYPE_NVIDIA_GB10:
    case ACCEL_TYPE_INTEL:
    case ACCEL_TYPE_AMD:
    case ACCEL_TYPE_MOORE_SOC:
        out[0] = ACCEL_SUPPORT_MEMSLICE;
        out[1] = ACCEL_SUPPORT_EXCLUSIVE;
        return 2;
    case ACCEL_TYPE_CPU:
        out[0] = ACCEL_SUPPORT_MEMSLICE;
        return 1;
    default:
        out[0] = ACCEL_SUPPORT_EXCLUSIVE;
        return 1;
    }
}

bool accel_type_allows(enum accel_type t, enum accel_support s)
{
    enum accel_support m[3];
    size_t n = accel_type_modes(t, m);
    for (size_t i = 0; i < n; i++)
        if (m[i] == s)
            return true;
    return false;
}

static const char *const support_names[] = {"Exclusive", "MemorySlice",
                                            "TimeSlice"};
static const char *const support_codes[] = {"0", "1", "2"};
static const char *const support_labels[] = {"App exclusive", "Memory slicing",
                                             "Time slicing"};

bool accel_support_parse(const char *s, enum accel_support *out)
{
    if (s == NULL)
        return false;
    for (int i = 0; i < ACCEL_SUPPORT_COUNT; i++) {
        if (strcmp(s, support_names[i]) == 0 ||
            strcmp(s, support_codes[i]) == 0) {
            *out = (enum accel_support)i;
            return true;
        }
    }
    return false;
}

const char *accel_support_name(enum accel_support s)
{
    return (unsigned)s < ACCEL_SUPPORT_COUNT ? support_names[s] : "unknown";
}

const char *accel_support_code(enum accel_support s)
{
    return (unsigned)s < ACCEL_SUPPORT_COUNT ? support_codes[s] : "?";
}

const char *accel_support_label(enum accel_support s)
{
    return (unsigned)s < ACCEL_SUPPORT_COUNT ? support_labels[s] : "unknown";
}

bool accel_name_valid(const char *s)
{
    size_t n;
    if (s == NULL)
        return false;
    n = strlen(s);
    if (n == 0 || n > ACCEL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
            return false;
    }
    return true;
}
