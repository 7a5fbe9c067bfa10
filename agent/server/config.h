/* SPDX-License-Identifier: MIT */
/*
 * config.h: llgo-heapd's options (config.c), from the command line and a configuration
 * file whose keys are the long option names.
 */
#ifndef LLGO_AGENT_CONFIG_H
#define LLGO_AGENT_CONFIG_H

#include <stdio.h>

#include "budget.h"
#include "../dump/dump.h"
#include "../../common/log.h"
#include "server.h"
#include "../ingest/session.h"

/* Read when present and no --config is given. */
#define CONFIG_DEFAULT_PATH "/etc/llgo-heap/llgo-heapd.conf"

/* Never copied: server.budget points into it. */
struct config {
	struct server_opts server; /* its strings and trim list belong to this config */
	struct budget_limits budget;
	bool foreground;
	enum log_level log_level;
	const char *http_uids; /* --http-uids, checked by http_parse_uids */
	const char *http_token_file; /* --http-token-file (http_auth.c) */
	uid_t symbolizer_uid_first;  /* --symbolizer-uids (symuid.c) */
	uid_t symbolizer_uid_last;
	struct dump_opts dump;       /* --dump-*, --push (dump.c); strings in strings */
	const char *path;      /* the configuration file read, or NULL */
	char **strings;        /* everything the fields above point to */
	size_t nstrings;
};

/* Whether this daemon reads CONFIG_DEFAULT_PATH (when it exists and no --config is given):
 * the host's daemon does (socket-activated, or started without --socket); a private one on a
 * --socket of its own (llgo-heap run's, the tests') does not. Call before the server takes
 * the socket systemd passed. */
bool config_use_default(int argc, char **argv);

/* Defaults, then the configuration file (--config FILE, or CONFIG_DEFAULT_PATH when it exists
 * and use_default), then the command line, which wins (--trim lists add up). Returns 0, or 2
 * with a one-line reason in err (unknown option or key, bad value, unreadable file:
 * "FILE:LINE: ..."). --help prints the usage and exits. On failure c holds nothing to free. */
int config_load(struct config *c, int argc, char **argv, bool use_default, char *err,
		size_t errlen);
void config_free(struct config *c);
void config_usage(FILE *f);

#endif
