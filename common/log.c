// SPDX-License-Identifier: MIT
/*
 * log.c: llgo-heapd's log lines. Each line has a level (log.h); lines above the level set
 * with --log-level (or the configuration file, reloaded on SIGHUP) are dropped. Where the
 * line goes:
 *   - stderr connected to the journal (systemd sets JOURNAL_STREAM to the device and inode
 *     of the stream it gave us): "<N>text", the sd-daemon(3) prefix journald turns into the
 *     entry's priority; the journal adds the name and pid itself;
 *   - any other stderr: "llgo-heapd: LEVEL: text";
 *   - syslog once the daemon detached (log_use_syslog), at the level's priority.
 * At most LOG_LINES_PER_SEC lines a second, whatever their level, so a peer that reconnects
 * in a loop with bad packets cannot flood the log; what is dropped is counted and said in
 * the next line that gets through. Callers escape what they quote of hostile input.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_LINES_PER_SEC 50u

static _Atomic int log_level = LOG_LEVEL_INFO;

static struct {
	pthread_mutex_t lock;
	bool syslog;
	bool stream_checked, journal; /* whether stderr is JOURNAL_STREAM, checked once */
	time_t window;
	unsigned lines;
	unsigned long suppressed;
} log_state = { .lock = PTHREAD_MUTEX_INITIALIZER };

static const struct {
	const char *name;
	enum log_level level;
} log_names[] = {
	{ "error", LOG_LEVEL_ERROR }, { "warn", LOG_LEVEL_WARN }, { "warning", LOG_LEVEL_WARN },
	{ "info", LOG_LEVEL_INFO },   { "debug", LOG_LEVEL_DEBUG },
};

int log_parse_level(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
		if (strcmp(name, log_names[i].name) == 0) {
			*out = log_names[i].level;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
		if (log_names[i].level == level)
			return log_names[i].name;
	return "?";
}

void log_set_level(enum log_level level)
{
	atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
	return (enum log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

void log_use_syslog(bool on)
{
	pthread_mutex_lock(&log_state.lock);
	if (on && !log_state.syslog)
		openlog("llgo-heapd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_state.syslog = on;
	pthread_mutex_unlock(&log_state.lock);
}

/* JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected; it is inherited by
 * children whose stderr may be something else, so it counts only when stderr is that file. */
static bool log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* Under log_state.lock. */
static void log_emit_locked(enum log_level level, const char *text)
{
	if (log_state.syslog) {
		syslog((int)level, "%s", text);
	} else if (log_state.journal) {
		fprintf(stderr, "<%d>%s\n", (int)level, text);
	} else {
		fprintf(stderr, "llgo-heapd: %s: %s\n", log_level_name(level), text);
	}
}

void log_write(enum log_level level, const char *fmt, ...)
{
	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	time_t now = time(NULL);
	pthread_mutex_lock(&log_state.lock);
	if (!log_state.stream_checked) {
		log_state.journal = log_stderr_is_journal();
		log_state.stream_checked = true;
	}
	if (now != log_state.window) {
		log_state.window = now;
		log_state.lines = 0;
	}
	if (log_state.lines >= LOG_LINES_PER_SEC) {
		log_state.suppressed++;
		pthread_mutex_unlock(&log_state.lock);
		return;
	}
	log_state.lines++;
	if (log_state.suppressed) {
		char note[64];
		snprintf(note, sizeof(note), "(%lu log lines suppressed)", log_state.suppressed);
		log_state.suppressed = 0;
		log_emit_locked(LOG_LEVEL_WARN, note);
	}
	log_emit_locked(level, line);
	pthread_mutex_unlock(&log_state.lock);
}
