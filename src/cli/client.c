/* SPDX-License-Identifier: MIT */
/*
 * client.c: HTTP to acceld through libcurl. One easy handle per request
 * (accelctl makes a handful), a write callback that refuses to grow the
 * answer past CLIENT_MAX_RESPONSE, and the only place where an HTTP status
 * or a curl error becomes an accelctl exit status.
 */
#include "common/accel_setup.h"
#include "cli/client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"
#include "common/util.h"

/* curl's write callback: the answer grows up to CLIENT_MAX_RESPONSE
 * (the dynbuf's cap); past it the transfer is aborted. */
static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    return dynbuf_add(userdata, ptr, n) ? n : 0; /* 0: CURLE_WRITE_ERROR */
}

static struct curl_slist *make_headers(const struct cli_ctx *ctx)
{
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json");
    if (ctx->token != NULL && ctx->token[0] != '\0') {
        char *auth = xasprintf("Authorization: Bearer %s", ctx->token);
        h = curl_slist_append(h, auth);
        free(auth);
    }
    return h;
}

static CURLcode perform(CURL *curl, const char *method, const char *url,
                        struct curl_slist *headers, const char *payload,
                        struct dynbuf *rb)
{
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, rb);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CLIENT_CONNECT_TIMEOUT);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, CLIENT_TIMEOUT);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (payload != NULL) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    }
    return curl_easy_perform(curl);
}

/* Does a 2xx body still refuse? Its "code", when present, must be 0 or
 * 2xx (a failed check comes as HTTP 200 with code 422, SPEC 5; a stop that
 * is under way is HTTP 200 whose data.state is `stopping`, SPEC 5.6). */
static bool body_refuses(const json_t *body)
{
    const json_t *c = json_object_get(body, "code");
    json_int_t v;
    if (!json_is_integer(c))
        return false;
    v = json_integer_value(c);
    return v != 0 && (v < 200 || v > 299);
}

/* A string of v (a value, or its key kept in key) with its control
 * characters escaped, or NULL when it has none. */
static char *escaped(const char *s, size_t len)
{
    return s != NULL ? util_ctrl_escape(s, len) : NULL;
}

void client_escape_controls(json_t *v)
{
    size_t i;
    const char *k;
    json_t *e, *renamed;
    void *tmp;

    if (json_is_array(v)) {
        json_array_foreach(v, i, e)
            client_escape_controls(e);
    } else if (json_is_object(v)) {
        renamed = json_object();
        json_object_foreach_safe(v, tmp, k, e) {
            char *ek = escaped(k, strlen(k));
            client_escape_controls(e);
            if (ek != NULL) {
                json_object_set(renamed, ek, e);
                json_object_del(v, k);
                free(ek);
            }
        }
        json_object_update(v, renamed);
        json_decref(renamed);
    } else if (json_is_string(v)) {
        char *es = escaped(json_string_value(v), json_string_length(v));
        if (es != NULL)
            json_string_set(v, es);
        free(es);
    }
}

/* Turn a finished transfer into *out and an exit status. */
static int finish(const struct cli_ctx *ctx, CURL *curl, CURLcode rc,
                  struct dynbuf *rb, struct client_resp *out)
{
    if (rb->toobig) {
        fprintf(stderr, "accelctl: the answer of acceld is larger than %u "
                "MiB; refusing it\n", CLIENT_MAX_RESPONSE >> 20);
        return CLI_EXIT_REFUSED;
    }
    if (rc != CURLE_OK) {
        fprintf(stderr, "cannot reach acceld at %s: %s\n", ctx->server,
                curl_easy_strerror(rc));
        return CLI_EXIT_CONNECT;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out->status);
    if (rb->len > 0) {
        out->body = json_loadb(rb->p, rb->len, 0, NULL);
        if (ctx->output != CLI_OUTPUT_JSON && !ctx->raw_text)
            client_escape_controls(out->body); /* JSON: when shown */
        if (json_is_object(out->body))
            out->data = json_object_get(out->body, "data");
    }
    if (out->status >= 200 && out->status < 300 && !body_refuses(out->body))
        return CLI_EXIT_OK;
    return CLI_EXIT_REFUSED;
}

int client_call(const struct cli_ctx *ctx, const char *method,
                const char *path, json_t *body, struct client_resp *out)
{
    struct dynbuf rb;
    char *payload = NULL;
    char *url = xasprintf("%s%s", ctx->server, path);
    struct curl_slist *headers = make_headers(ctx);
    CURL *curl = curl_easy_init();
    int result = CLI_EXIT_CONNECT;

    dynbuf_init(&rb, CLIENT_MAX_RESPONSE);
    memset(out, 0, sizeof(*out));
    if (curl == NULL) {
        fprintf(stderr, "accelctl: cannot initialize libcurl\n");
        goto out;
    }
    if (body != NULL)
        payload = json_dumps(body, JSON_COMPACT);
    CURLcode rc = perform(curl, method, url, headers, payload, &rb);
    result = finish(ctx, curl, rc, &rb, out);
out:
    if (curl != NULL)
        curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    free(payload);
    free(url);
    dynbuf_release(&rb);
    return result;
}

void client_resp_release(struct client_resp *resp)
{
    if (resp == NULL)
        return;
    json_decref(resp->body);
    resp->body = NULL;
    resp->data = NULL;
    resp->status = 0;
}

char *client_escape(const char *segment)
{
    char *e = curl_easy_escape(NULL, segment, 0);
    char *copy = xstrdup(e != NULL ? e : "");
    curl_free(e);
    return copy;
}

char *client_path(const char *prefix, const char *name, const char *suffix)
{
    char *e = client_escape(name);
    char *p = xasprintf("%s%s%s", prefix, e, suffix);
    free(e);
    return p;
}

char *client_device_path(const char *node, const char *dev, const char *what)
{
    char *en = client_escape(node), *ed = client_escape(dev);
    char *p = xasprintf("/api/compute-resources/nodes/%s/devices/%s/%s", en,
                        ed, what);
    free(en);
    free(ed);
    return p;
}

const char *client_check_type(const struct client_resp *resp)
{
    const json_t *c = json_object_get(resp->body, "code");
    if (!json_is_integer(c) || json_integer_value(c) != 422 ||
        !json_is_object(resp->data))
        return NULL;
    return json_string_value(json_object_get(resp->data, "type"));
}

const json_t *client_check_data(const struct client_resp *resp)
{
    if (client_check_type(resp) == NULL)
        return NULL;
    return json_object_get(resp->data, "Data");
}
