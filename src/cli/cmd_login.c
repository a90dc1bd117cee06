/* SPDX-License-Identifier: MIT */
/*
 * cmd_login.c: `accelctl login URL [--token T]` checks that acceld at URL
 * answers an authenticated request with the token (GET /api/apps, which
 * every user may make) and only then saves both (config.h); `accelctl
 * open` prints the web page's link with #token= so that a browser logs in
 * with it (the page reads the fragment, which never reaches the server).
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/client.h"
#include "cli/config.h"

int cmd_login(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct client_resp r;
    char *path;
    int rc;

    (void)args;
    rc = client_call(ctx, "GET", "/api/apps", NULL, &r);
    if (rc == CLI_EXIT_REFUSED) {
        fprintf(stderr, "accelctl login: %s did not accept the token "
                "(HTTP %ld); nothing saved\n", ctx->server, r.status);
        client_resp_release(&r);
        return CLI_EXIT_REFUSED;
    }
    client_resp_release(&r);
    if (rc != CLI_EXIT_OK) {
        fprintf(stderr, "accelctl login: nothing saved\n");
        return rc;
    }
    if (config_save(ctx->server, ctx->token) != 0)
        return CLI_EXIT_USAGE;
    path = config_path();
    printf("Logged in to %s; saved in %s.\n", ctx->server, path);
    free(path);
    return CLI_EXIT_OK;
}

int cmd_login_open(struct cli_ctx *ctx, const struct cli_args *args)
{
    (void)args;
    if (ctx->token == NULL) {
        printf("%s/\n", ctx->server);
        fprintf(stderr, "accelctl open: no token known (accelctl login, "
                "--token or $ACCEL_TOKEN); the page will ask for one\n");
        return CLI_EXIT_OK;
    }
    printf("%s/#token=%s\n", ctx->server, ctx->token);
    return CLI_EXIT_OK;
}
