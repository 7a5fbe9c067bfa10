/* SPDX-License-Identifier: MIT */
/*
 * ident.h: the identity of a connected process, re-checked against the live process before
 * the daemon reads anything of it (ident.c).
 */
#ifndef LLGO_AGENT_IDENT_H
#define LLGO_AGENT_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ident {
	pid_t pid;
	uid_t uid; /* SO_PEERCRED at connect (effective ids) */
	gid_t gid;
	int pidfd;      /* pins the process that connected; -1 unknown */
	uint64_t start; /* /proc/PID/stat starttime while pinned; 0 unknown */
};

/* A pidfd (close-on-exec) for the peer of sock (SO_PEERPIDFD), else pidfd_open(pid); -1. */
int ident_pidfd_of(int sock, pid_t pid);
/* Whether the process of pidfd has not exited. */
bool ident_pidfd_alive(int pidfd);
/* Fill id at accept: pidfd and start time of the peer. -ESRCH: gone already. */
int ident_open(int sock, pid_t pid, uid_t uid, gid_t gid, struct ident *id);
/* 0 when the live process is still the one that connected, with the same owner and
 * readable by it; else -ESRCH (exited, pid reused) or -EACCES (setuid/setgid exec, not
 * dumpable), with a one-line reason in why. */
int ident_verify(const struct ident *id, char *why, size_t n);
/* As ident_verify; allow_exited: a process that has exited since is still itself while its
 * zombie (same start time, same ids) is there, for a check made after a read. */
int ident_verify_ex(const struct ident *id, bool allow_exited, char *why, size_t n);
void ident_close(struct ident *id);
/* starttime of /proc/PID/stat. */
int ident_start_time(pid_t pid, uint64_t *start);
/* State (field 3: R, S, T, Z...) and starttime of /proc/PID/stat: 0, or -errno. */
int ident_proc_stat(pid_t pid, char *state, uint64_t *start);
/* Fields 3 (state) and 22 (starttime) of a /proc/PID/stat text (the command may hold
 * spaces and parentheses: parsing starts after the last ')'). */
int ident_parse_stat(const char *buf, char *state, uint64_t *start);

#endif
