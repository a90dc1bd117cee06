/* SPDX-License-Identifier: MIT */
/*
 * api_static.c: the web page's files (api_static.h): a file server with
 * content negotiation, apart from the API's handlers because it reads the
 * file system, not the daemon's state.
 */
#include "common/accel_setup.h"
#include "daemon/api/api_static.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/util.h"
#include "daemon/state.h"

static const char *mime_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    static const char *const map[][2] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript"},
        {".mjs", "text/javascript"},
        {".css", "text/css"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".json", "application/json"},
        {".ico", "image/x-icon"},
        {".woff2", "font/woff2"},
    };
    for (size_t i = 0; dot && i < sizeof map / sizeof map[0]; i++)
        if (strcmp(dot, map[i][0]) == 0)
            return map[i][1];
    return "application/octet-stream";
}

/* Does an Accept-Encoding header accept `enc` (a token not followed by q=0)? */
static bool accepts_encoding(const char *hdr, const char *enc)
{
    size_t n = strlen(enc);
    const char *p = hdr;

    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        if (len >= n && strncasecmp(p, enc, n) == 0 &&
            (len == n || p[n] == ';' || p[n] == ' ')) {
            const char *q = memmem(p, len, "q=0", 3);
            /* "q=0", "q=0.0", "q=0.000" refuse; "q=0.5" accepts */
            if (q == NULL)
                return true;
            q += 3;
            while (q < p + len && (*q == '.' || *q == '0'))
                q++;
            return q < p + len && *q >= '1' && *q <= '9';
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* The twin of `path` that the web build compressed (path.br, path.gz), when
 * the browser accepts it: its stat in *st, its Content-Encoding returned,
 * and path extended in place. NULL: send the file as it is. */
static const char *pick_encoding(struct http_req *r, char *path, size_t cap,
                                 struct stat *st)
{
    static const char *const enc[][2] = {{"br", ".br"}, {"gzip", ".gz"}};
    const char *ae = http_header(r, "Accept-Encoding");
    size_t len = strlen(path);
    struct stat zs;

    for (size_t i = 0; ae != NULL && i < sizeof enc / sizeof enc[0]; i++) {
        if (!accepts_encoding(ae, enc[i][0]) ||
            len + strlen(enc[i][1]) + 1 > cap)
            continue;
        snprintf(path + len, cap - len, "%s", enc[i][1]);
        if (stat(path, &zs) == 0 && S_ISREG(zs.st_mode)) {
            *st = zs;
            return enc[i][0];
        }
        path[len] = '\0';
    }
    return NULL;
}

/* The page's files (SPEC 7). Each answer carries an ETag (size, mtime and
 * encoding of the file sent) and Cache-Control: no-cache, so a reload asks
 * and gets 304 with no body when nothing changed; a browser that accepts
 * br or gzip gets the precompressed twin the web build wrote. */
void api_static(struct http_req *r)
{
    char path[PATH_MAX];
    const char *rel = strcmp(r->path, "/") == 0 ? "/index.html" : r->path;
    const char *inm;
    struct stat st;

    if (strncmp(r->path, "/api/", 5) == 0 || strncmp(r->path, "/hami/", 6) == 0) {
        http_reply_error(r, ACCEL_ENOTFOUND, "no route for %.20s %.200s",
                         r->method, r->path);
        return;
    }
    if (strstr(rel, "..") != NULL || r->d->cfg.web_dir == NULL) {
        http_reply_error(r, ACCEL_ENOTFOUND, "no such page");
        return;
    }
    snprintf(path, sizeof path, "%s%s", r->d->cfg.web_dir, rel);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        /* single-page app: unknown pages get index.html */
        snprintf(path, sizeof path, "%s/index.html", r->d->cfg.web_dir);
        if (stat(path, &st) != 0) {
            http_reply_error(r, ACCEL_ENOTFOUND,
                             "the web page is not built (run "
                             "scripts/setup-web.sh)");
            return;
        }
        rel = "/index.html";
    }
    r->reply_encoding = pick_encoding(r, path, sizeof path, &st);
    snprintf(r->reply_etag, sizeof r->reply_etag, "\"%llx-%llx-%s\"",
             (unsigned long long)st.st_size,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ULL +
                 (unsigned long long)st.st_mtim.tv_nsec,
             r->reply_encoding ? r->reply_encoding : "identity");
    free(r->reply);
    r->reply = NULL;
    r->reply_type = mime_of(rel);
    inm = http_header(r, "If-None-Match");
    if (inm != NULL && (strcmp(inm, "*") == 0 || strstr(inm, r->reply_etag))) {
        r->status = 304;
        r->reply = xstrdup("");
        return;
    }
    r->reply_file = xstrdup(path);
    r->status = 200;
}
