/* SPDX-License-Identifier: MIT */
/*
 * symuid.h: which uid a symbolizer process runs as when llgo-heapd runs as root (symuid.c),
 * and how its processes are started and ended (symspawn.c). Used by symhelper.c; the range
 * is set from the configuration (daemon.c, config.c).
 */
#ifndef LLGO_AGENT_SYMUID_H
#define LLGO_AGENT_SYMUID_H

#include <stdbool.h>
#include <sys/types.h>

/* --symbolizer-uids by default: a range systemd leaves unused (symuid.c says why). */
#define SYMUID_DEFAULT_FIRST 60578u
#define SYMUID_DEFAULT_LAST 61183u

/* ---- symuid.c ----------------------------------------------------------------------------- */

/* "FIRST-LAST" (1 <= FIRST <= LAST < 2^31): 0, or -EINVAL. */
int symuid_parse_range(const char *text, uid_t *first, uid_t *last);
/* The range helpers of their own take their uids from (uids recorded outside it are replaced
 * at their helper's next start). */
void symuid_set_range(uid_t first, uid_t last);
/* Whether the helper of served's processes needs a uid of its own: root, system users,
 * nobody, and uids of the range. */
bool symuid_isolated(uid_t served);
/* The uid (and the gid of the same number) served's helper runs as, kept while it stays free
 * and in the range: 0, or -EAGAIN when the range has no free uid (logged). */
int symuid_pick(uid_t served, uid_t *run);

/* ---- symspawn.c --------------------------------------------------------------------------- */

/* Start path with argv, with child_fd as descriptor SYMPROTO_FD, stdin and stdout on
 * /dev/null and nothing else of ours: its pid, or -errno. */
pid_t symspawn_start(const char *path, char *const argv[], int child_fd);
/* Whether our child pid is stopped (SIGSTOP, or a tracer's stop). */
bool symspawn_stopped(pid_t pid);
/* Reap our child pid, SIGKILLed first when kill_it: its wait status, or -1 when it could not
 * be killed and did not exit within a second (it is then left, and logged). */
int symspawn_end(pid_t pid, bool kill_it);

#endif
