/* SPDX-License-Identifier: MIT */
/* log.h: acceld's leveled log to stderr; the level is read once at start. */
#ifndef ACCEL_DAEMON_LOG_H
#define ACCEL_DAEMON_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* "debug" | "info" | "warn" | "error"; returns -1 for anything else. */
int log_level_parse(const char *s);
void log_set_level(enum log_level l);
void log_msg(enum log_level l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif /* ACCEL_DAEMON_LOG_H */
