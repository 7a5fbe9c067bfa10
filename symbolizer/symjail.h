/* SPDX-License-Identifier: MIT */
/*
 * symjail.h: the symbolizer process gives up everything before it reads a request
 * (symjail.c).
 */
#ifndef LLGO_SYMBOLIZER_SYMJAIL_H
#define LLGO_SYMBOLIZER_SYMJAIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct symjail_limits {
	uid_t uid; /* the uid and gid to run as (ignored unless we may change them) */
	gid_t gid;
	uint64_t memory_bytes; /* RLIMIT_AS; 0: none */
	uint64_t max_files;    /* RLIMIT_NOFILE */
	pid_t parent;          /* the daemon: we die with it (0: no parent-death signal) */
};

/* Drop privileges and install the system call filter; 0, or -errno with why[] said. */
int symjail_enter(const struct symjail_limits *lim, char *why, size_t whylen);

#endif
