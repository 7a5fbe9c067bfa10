/* SPDX-License-Identifier: MIT */
/*
 * heapd.h: the one way tests start a private llgo-heapd and talk to it (heapd.c, compiled
 * once and linked into every test binary). The launcher: the real daemon binary
 * ($LLGO_TEST_HEAPD, else the build's), on DIR/heapd.sock with its stdout and stderr in
 * DIR/heapd.log, taken down with the test (PR_SET_PDEATHSIG) and stopped by pid. The client:
 * client/client.c, the CLI's own protocol code, with assertions around it for the common
 * requests. Tests that misbehave on purpose use heapd_connect and client.h's pieces.
 */
#ifndef LLGO_TESTS_HEAPD_H
#define LLGO_TESTS_HEAPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../client/client.h"

/* A request's answer may take this long per packet (a big snapshot under sanitizers). */
#define HEAPD_ANSWER_TIMEOUT_MS 60000u
/* heapd_connect's send and receive timeout (tests that wait for one reply). */
#define HEAPD_CONNECT_TIMEOUT_MS 10000u

struct heapd {
	pid_t pid; /* 0 when not running */
	char dir[80]; /* short enough for sun_path with the names tests put inside */
	char sock[108]; /* sockaddr_un's sun_path */
	char log[300];
	bool http;    /* heapd_spawn saw --http: heapd_wait also waits for the port */
	int port;     /* with --http: the port it serves on, read from its log */
	long log_start; /* bytes the log held when this daemon was spawned (it appends) */
	bool own_dir; /* heapd_init made dir (0755); heapd_cleanup removes it */
	bool detach;  /* started without --foreground (the daemon forks away) */
	/* argv run in front of the daemon (e.g. setpriv ... --), NULL-terminated; NULL: none */
	const char *const *wrap;
};

/* The daemon binary: $LLGO_TEST_HEAPD (another build, to see an attack succeed against it),
 * else the build's llgo-heapd. */
const char *heapd_path(void);
/* Paths in dir, or (dir NULL) in a new folder of its own. Clears d first. */
void heapd_init(struct heapd *d, const char *dir);
/* Fork and exec the daemon with extra options (NULL-terminated, may be NULL); returns its
 * pid without waiting (a daemon that must refuse to start is reaped by the caller). */
pid_t heapd_spawn(struct heapd *d, const char *const *extra);
/* Wait (10 s at most) until the socket answers and, with --http, the port is logged; false
 * when it did not (d->pid > 0: also when the daemon exited). */
bool heapd_wait(struct heapd *d);
/* spawn + wait on an initialized d (d->wrap, d->detach as the caller set them after
 * heapd_init); asserts it started (its log in the message otherwise). */
void heapd_run(struct heapd *d, const char *const *extra);
/* init + run: the usual start. */
void heapd_start(struct heapd *d, const char *dir, const char *const *extra);
/* Spawn with extra options a daemon that must refuse to start: its wait status once it
 * exited (-1 when it still ran after 10 s: then killed); what it logged in *log (malloc'ed)
 * when log is not NULL. */
int heapd_refusal(struct heapd *d, const char *const *extra, char **log);
bool heapd_alive(struct heapd *d);
/* SIGSTOP, and wait until every thread of the daemon has stopped: kill() wakes one thread
 * to take the stop, and the others go on serving until it did (a client that starts at once
 * can still be answered). heapd_resume: SIGCONT. */
void heapd_pause(struct heapd *d);
void heapd_resume(struct heapd *d);
/* SIGTERM and wait: the wait status, or -1 when it had to be killed after 10 s. */
int heapd_stop(struct heapd *d);
/* SIGKILL (no orderly stop) and reap it. */
void heapd_kill(struct heapd *d);
/* heapd_stop expecting a clean stop: alive until then, exit status 0, socket removed. */
void heapd_stop_clean(struct heapd *d);
/* Stop the daemon if it still runs (heapd_stop, nothing checked), and remove the folder
 * heapd_init made (unless LLGO_KEEP_TMP is set). */
void heapd_cleanup(struct heapd *d);
/* The end of most tests: heapd_stop_clean, then heapd_cleanup. */
void heapd_finish(struct heapd *d);
/* The end of tests that may have stopped or restarted the daemon: heapd_stop expected to
 * give 0 (a daemon stopped already does), then heapd_cleanup. */
void heapd_end(struct heapd *d);
/* The whole log (malloc'ed, "" when missing). */
char *heapd_log(const struct heapd *d);

/* ---- requests (client.c) ----------------------------------------------------------------- */

/* A connection with HEAPD_CONNECT_TIMEOUT_MS; the descriptor or -errno. */
int heapd_connect(const char *sock);
/* One request on a new connection: 0 when END arrived (a->status, a->message say how it was
 * taken), else client_request's error. Free a with client_answer_free. */
int heapd_request(const char *sock, const void *req, size_t n, struct client_answer *a);
int heapd_snapshot_answer(const char *sock, pid_t pid, uint32_t fmt, struct client_answer *a);
int heapd_set_rate(const char *sock, pid_t pid, uint64_t rate, struct client_answer *a);
/* The snapshot (NUL-terminated, malloc'ed; *len its length when len); asserts success. */
char *heapd_snapshot(const char *sock, pid_t pid, uint32_t fmt, size_t *len);
/* Every LIST row (malloc'ed); asserts success. Returns the number of rows. */
size_t heapd_list_all(const char *sock, struct llgo_list_entry **rows);
/* The first max rows copied into out; returns the number of rows the daemon listed. */
size_t heapd_list(const char *sock, struct llgo_list_entry *out, size_t max);
/* The LIST row of pid (the last one: the one `snapshot PID` means); false when absent. */
bool heapd_list_pid(const char *sock, pid_t pid, struct llgo_list_entry *out);

#endif
