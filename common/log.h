/* SPDX-License-Identifier: MIT */
/*
 * log.h: llgo-heapd's log (log.c). One line per event, with a level, on stderr (journald
 * takes it from there under systemd) or, once the daemon detached, to syslog.
 */
#ifndef LLGO_COMMON_LOG_H
#define LLGO_COMMON_LOG_H

#include <stdbool.h>

/* The values are syslog priorities, so they double as sd-daemon "<N>" prefixes. */
enum log_level {
	LOG_LEVEL_ERROR = 3,
	LOG_LEVEL_WARN = 4,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

/* "error", "warn" (or "warning"), "info", "debug": 0, else -EINVAL. */
int log_parse_level(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);
/* Lines above this level are dropped (default info). Any thread, any time. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Write to syslog (facility daemon) instead of stderr: for a daemon that detached. */
void log_use_syslog(bool on);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
