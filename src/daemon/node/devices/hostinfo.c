/* SPDX-License-Identifier: MIT */
/*
 * hostinfo.c: uname(2), os-release(5) and the listen address as the node
 * fields of hostinfo.h.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/hostinfo.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

/* PRETTY_NAME of an os-release file into out ("" when absent). Values may
 * be quoted with " or ' (os-release(5)); escapes are kept as written. */
static void pretty_name(const char *path, char *out, size_t len)
{
    char line[512];
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        char *v, *end;
        if (strncmp(line, "PRETTY_NAME=", 12) != 0)
            continue;
        v = line + 12;
        v[strcspn(v, "\r\n")] = '\0';
        end = v + strlen(v);
        if ((*v == '"' || *v == '\'') && end > v + 1 && end[-1] == *v) {
            end[-1] = '\0';
            v++;
        }
        len = strlen(v) < len ? strlen(v) + 1 : len;
        memcpy(out, v, len - 1);
        out[len - 1] = '\0';
        break;
    }
    fclose(f);
}

/* The address of "HOST:PORT" / "[V6]:PORT" when HOST is one numeric
 * address other than a wildcard, else "". */
static void listen_ip(const char *listen, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon;
    unsigned char buf[sizeof(struct in6_addr)];
    size_t n;
    out[0] = '\0';
    if (listen == NULL)
        return;
    if (*listen == '[') {
        const char *close = strchr(listen, ']');
        if (close == NULL)
            return;
        n = (size_t)(close - listen - 1);
        listen++;
    } else {
        colon = strrchr(listen, ':');
        n = colon ? (size_t)(colon - listen) : strlen(listen);
    }
    if (n == 0 || n >= sizeof host)
        return;
    memcpy(host, listen, n);
    host[n] = '\0';
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
        return;
    if ((inet_pton(AF_INET, host, buf) == 1 ||
         inet_pton(AF_INET6, host, buf) == 1) && n < len)
        memcpy(out, host, n + 1);
}

json_t *hostinfo_json(const char *listen, const char *os_release)
{
    struct utsname u;
    char os[256], sys[sizeof u.sysname], ip[INET6_ADDRSTRLEN];
    bool have = uname(&u) == 0;
    if (os_release != NULL) {
        pretty_name(os_release, os, sizeof os);
    } else {
        pretty_name("/etc/os-release", os, sizeof os);
        if (os[0] == '\0')
            pretty_name("/usr/lib/os-release", os, sizeof os);
    }
    sys[0] = '\0';
    if (have) {
        size_t i = 0;
        for (; u.sysname[i] && i + 1 < sizeof sys; i++)
            sys[i] = (char)tolower((unsigned char)u.sysname[i]);
        sys[i] = '\0';
    }
    listen_ip(listen, ip, sizeof ip);
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "arch",
                     have ? u.machine : "", "kernel", have ? u.release : "",
                     "os", sys, "osImage", os, "ip", ip);
}
