/* SPDX-License-Identifier: MIT */
/*
 * config.h: accelctl's saved login, $XDG_CONFIG_HOME/accel/config (else
 * ~/.config/accel/config): the server and the token `accelctl login`
 * stored. Lines "server = URL" and "token = T"; '#' starts a comment;
 * other keys are ignored. The file is 0600 in a 0700 directory, written
 * to a fresh temporary file and renamed over the old one.
 */
#ifndef ACCEL_CLI_CONFIG_H
#define ACCEL_CLI_CONFIG_H

/* The saved login; either member may be NULL (both owned). */
struct cli_config {
    char *server; /* as given to login, normalized (scheme, no '/') */
    char *token;
};

/* The config file's path (malloc'd), or NULL when neither
 * XDG_CONFIG_HOME nor HOME is set (absolute paths only). */
char *config_path(void);

/* Read the saved login into *c (zeroed first); a missing file is an
 * empty login, and so is one this user may not read (EACCES). Returns 0,
 * or -1 with a message printed when the file cannot be read otherwise or
 * is readable by others (mode & 077). */
int config_load(struct cli_config *c);

/* Save server and token (either may be NULL: not written). Returns 0, or
 * -1 with a message naming the path and the reason printed. */
int config_save(const char *server, const char *token);

void config_release(struct cli_config *c);

#endif /* ACCEL_CLI_CONFIG_H */
