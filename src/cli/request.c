/* SPDX-License-Identifier: MIT */
/* request.c: the common request-and-report path of the commands. */
#include "cli/request.h"

#include "cli/client.h"
#include "cli/sentence.h"
#include "cli/table.h"

int request_report(struct cli_ctx *ctx, const char *method, const char *path,
                   json_t *body, request_print_fn print, const void *arg)
{
    struct client_resp r;
    int rc = client_call(ctx, method, path, body, &r);
    if (request_outcome(ctx, &rc, &r))
        print(r.data, arg);
    client_resp_release(&r);
    return rc;
}

bool request_outcome(const struct cli_ctx *ctx, int *rc,
                     const struct client_resp *resp)
{
    if (*rc == CLI_EXIT_REFUSED)
        *rc = sentence_report_ctx(ctx, resp);
    else if (*rc == CLI_EXIT_OK && ctx->output == CLI_OUTPUT_JSON)
        table_print_json(resp->data);
    else
        return *rc == CLI_EXIT_OK;
    return false;
}
