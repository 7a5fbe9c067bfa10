// SPDX-License-Identifier: MIT
/*
 * config.c: llgo-heapd's options. One table of long options serves the command line
 * (--name VALUE, --name=VALUE) and the configuration file (--config FILE, by default
 * CONFIG_DEFAULT_PATH when it exists, for the host's daemon only: config_use_default): one
 * "name = value" per line with the option's long name without its dashes, '#' starting a
 * comment line, blank lines ignored; a flag takes yes/no (true/false, 1/0). The file is read first and the command line wins, so a reload
 * (daemon.c, on SIGHUP) reads the file again and applies the same command line over it.
 * Every value is checked here; what may change while the daemon runs is daemon.c's call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "listen.h"
#include "../symbol/symuid.h"

enum config_id {
	CONFIG_CONFIG,
	CONFIG_SOCKET,
	CONFIG_FOREGROUND,
	CONFIG_LOG_LEVEL,
	CONFIG_MAX_BUCKETS,
	CONFIG_MAX_MEMORY,
	CONFIG_KEEP_EXITED,
	CONFIG_HTTP,
	CONFIG_HTTP_UIDS,
	CONFIG_HTTP_TOKEN_FILE,
	CONFIG_TRIM,
	CONFIG_VERIFY_EVERY,
	CONFIG_KEEP_EXITED_PER_UID,
	CONFIG_KEEP_EXITED_AGE,
	CONFIG_SYMBOLIZER_UIDS,
	CONFIG_BUDGET, /* per uid or for all users, of .kind */
	CONFIG_DUMP_DIR,
	CONFIG_DUMP_EVERY,
	CONFIG_DUMP_KEEP,
	CONFIG_DUMP_MAX_BYTES_PER_UID,
	CONFIG_DUMP_MAX_BYTES,
	CONFIG_DUMP_OOM,
	CONFIG_PUSH,
	CONFIG_PUSH_TIMEOUT,
};

static const struct config_option {
	const char *name; /* without the dashes: the key in the file */
	enum config_id id;
	bool flag;
	enum budget_kind kind; /* CONFIG_BUDGET */
	bool per_uid;
} config_options[] = {
	{ "config", CONFIG_CONFIG, false, 0, false },
	{ "socket", CONFIG_SOCKET, false, 0, false },
	{ "foreground", CONFIG_FOREGROUND, true, 0, false },
	{ "log-level", CONFIG_LOG_LEVEL, false, 0, false },
	{ "max-buckets", CONFIG_MAX_BUCKETS, false, 0, false },
	{ "max-memory", CONFIG_MAX_MEMORY, false, 0, false },
	{ "keep-exited", CONFIG_KEEP_EXITED, false, 0, false },
	{ "http", CONFIG_HTTP, false, 0, false },
	{ "http-uids", CONFIG_HTTP_UIDS, false, 0, false },
	{ "http-token-file", CONFIG_HTTP_TOKEN_FILE, false, 0, false },
	{ "trim", CONFIG_TRIM, false, 0, false },
	{ "verify-every", CONFIG_VERIFY_EVERY, false, 0, false },
	{ "keep-exited-per-uid", CONFIG_KEEP_EXITED_PER_UID, false, 0, false },
	{ "keep-exited-age", CONFIG_KEEP_EXITED_AGE, false, 0, false },
	{ "symbolizer-uids", CONFIG_SYMBOLIZER_UIDS, false, 0, false },
	{ "max-conns-per-uid", CONFIG_BUDGET, false, BUDGET_CONNS, true },
	{ "max-conns", CONFIG_BUDGET, false, BUDGET_CONNS, false },
	{ "max-processes-per-uid", CONFIG_BUDGET, false, BUDGET_SESSIONS, true },
	{ "max-processes", CONFIG_BUDGET, false, BUDGET_SESSIONS, false },
	{ "max-rings-per-uid", CONFIG_BUDGET, false, BUDGET_RINGS, true },
	{ "max-rings", CONFIG_BUDGET, false, BUDGET_RINGS, false },
	{ "max-ring-memory-per-uid", CONFIG_BUDGET, false, BUDGET_RING_BYTES, true },
	{ "max-ring-memory", CONFIG_BUDGET, false, BUDGET_RING_BYTES, false },
	{ "max-bucket-memory-per-uid", CONFIG_BUDGET, false, BUDGET_BUCKET_BYTES, true },
	{ "max-bucket-memory", CONFIG_BUDGET, false, BUDGET_BUCKET_BYTES, false },
	{ "max-unread-per-uid", CONFIG_BUDGET, false, BUDGET_OUT_BYTES, true },
	{ "max-unwind-memory-per-uid", CONFIG_BUDGET, false, BUDGET_UNWIND_BYTES, true },
	{ "max-unwind-memory", CONFIG_BUDGET, false, BUDGET_UNWIND_BYTES, false },
	{ "dump-dir", CONFIG_DUMP_DIR, false, 0, false },
	{ "dump-every", CONFIG_DUMP_EVERY, false, 0, false },
	{ "dump-keep", CONFIG_DUMP_KEEP, false, 0, false },
	{ "dump-max-bytes-per-uid", CONFIG_DUMP_MAX_BYTES_PER_UID, false, 0, false },
	{ "dump-max-bytes", CONFIG_DUMP_MAX_BYTES, false, 0, false },
	{ "dump-oom", CONFIG_DUMP_OOM, false, 0, false },
	{ "push", CONFIG_PUSH, false, 0, false },
	{ "push-timeout", CONFIG_PUSH_TIMEOUT, false, 0, false },
};

void config_usage(FILE *f)
{
	struct budget_limits d;
	budget_defaults(&d);
	fprintf(f,
		"usage: llgo-heapd [--config FILE] [--socket PATH] [--foreground]\n"
		"                  [--log-level LEVEL] [--max-buckets N] [--max-memory BYTES]\n"
		"                  [--keep-exited N] [--http [ADDR:]PORT [--http-uids UID,...]\n"
		"                  [--http-token-file FILE]] [--trim NAME,...] [--verify-every N]\n"
		"                  [--symbolizer-uids FIRST-LAST]\n"
		"                  [--dump-dir DIR] [--dump-every SECONDS] [--push URL]\n"
		"  --config FILE       read options from FILE, one \"name = value\" a line, name\n"
		"                      the long option without dashes, '#' comments (default:\n"
		"                      " CONFIG_DEFAULT_PATH " when it exists,\n"
		"                      unless --socket is given and systemd passed no socket);\n"
		"                      the command line wins; SIGHUP reads it again\n"
		"  --socket PATH       listen here (default: $LLGO_HEAP_SOCKET, else\n"
		"                      /run/llgo-heapd/llgo-heapd.sock for root,\n"
		"                      $XDG_RUNTIME_DIR/llgo-heapd.sock otherwise);\n"
		"                      a socket passed by systemd (LISTEN_FDS) takes precedence\n"
		"  --foreground        do not daemonize; log to stderr (journald under systemd)\n"
		"  --log-level LEVEL   error, warn, info (default) or debug\n"
		"  --max-buckets N     buckets per process before records go to an overflow\n"
		"                      bucket (default 1000000)\n"
		"  --max-memory BYTES  bucket memory per process, K/M/G suffixes (default 512M)\n"
		"  --keep-exited N     exited processes kept for snapshots (default %u)\n"
		"  --http [ADDR:]PORT  serve Go's /debug/pprof/{heap,allocs}?pid=N, /targets\n"
		"                      (Prometheus http_sd) and /metrics over HTTP (off by\n"
		"                      default; PORT alone is 127.0.0.1, 0.0.0.0:PORT every\n"
		"                      interface, [::1]:PORT IPv6)\n"
		"  --http-uids UID,... serve only processes of these uids or user names\n"
		"                      (default: with a token, the daemon's own uid; without,\n"
		"                      each local client its own processes, root's all)\n"
		"  --http-token-file FILE  require \"Authorization: Bearer TOKEN\" (the file's\n"
		"                      content, writable by its owner only) of every HTTP\n"
		"                      request but the index /; SIGHUP reads the file again\n"
		"  --trim NAME,...     hide these functions (NAME* for a prefix) from the top\n"
		"                      of every stack, e.g. a linked allocator's plumbing;\n"
		"                      may be repeated\n"
		"  --verify-every N    check one sample in N of every process against the\n"
		"                      kernel's stack (eBPF; needs CAP_BPF and CAP_PERFMON);\n"
		"                      results in `llgo-heap list` and profile comments\n"
		"  --symbolizer-uids FIRST-LAST  uids for the symbolizers of root's, system\n"
		"                      users' and nobody's processes, one each, free of any\n"
		"                      account, subuid range or process (default %u-%u)\n"
		"\n"
		"Snapshots the daemon takes on its own (off by default):\n"
		"  --dump-dir DIR      write them to DIR/UID/COMM.PID.TIME.{heap,oom}.pb.gz,\n"
		"                      each UID folder (0700) and file (0600) owned by that user;\n"
		"                      DIR and the folders above it must be root's and not\n"
		"                      writable by others (made 0711 when missing)\n"
		"  --dump-every SECONDS  a pprof snapshot of every live profiled process each\n"
		"                      SECONDS, to --dump-dir and/or --push\n"
		"  --dump-keep N       periodic snapshots kept per process (default %u)\n"
		"  --dump-max-bytes-per-uid BYTES  kept per user, oldest removed (default %lluM)\n"
		"  --dump-max-bytes BYTES  kept for all users: the user holding the most loses\n"
		"                      its oldest first (default %lluM)\n"
		"  --dump-oom MODE     with --dump-dir, the profile of a process the kernel's\n"
		"                      OOM killer chose: auto (default: the oom:mark_victim\n"
		"                      tracepoint with eBPF, else the cgroups' oom_kill\n"
		"                      counters), bpf, cgroup or off\n"
		"  --push URL          POST each periodic snapshot to URL/ingest?format=pprof\n"
		"                      (Pyroscope's ingest API), for processes of the\n"
		"                      --http-uids only (default: the daemon's own uid)\n"
		"  --push-timeout SECONDS  give up on one push after this long (default %u)\n"
		"\n"
		"Limits for a shared host (per uid, and for all users together; 0 = none).\n"
		"A user over a limit is refused or degraded alone, logged once, and flagged\n"
		"in `llgo-heap list`; root is held by the totals only, an eighth of which is\n"
		"root's, and no other user may take more than it leaves to the others:\n"
		"  --max-conns-per-uid N              open connections (default %llu)\n"
		"  --max-conns N                      (default %llu)\n"
		"  --max-processes-per-uid N          live profiled processes (default %llu)\n"
		"  --max-processes N                  (default %llu)\n"
		"  --max-rings-per-uid N              rings mapped (default %llu)\n"
		"  --max-rings N                      (default %llu)\n"
		"  --max-ring-memory-per-uid BYTES    ring memory mapped (default %lluM)\n"
		"  --max-ring-memory BYTES            (default %lluM)\n"
		"  --max-bucket-memory-per-uid BYTES  aggregated profiles, live and exited\n"
		"                                     (default %lluM; over it, new records of\n"
		"                                     that user are counted, not aggregated)\n"
		"  --max-bucket-memory BYTES          (default %lluM)\n"
		"  --max-unread-per-uid BYTES         answers its clients do not read\n"
		"                                     (default %lluM; all users: 512M)\n"
		"  --max-unwind-memory-per-uid BYTES  copies of its programs' and libraries'\n"
		"                                     unwind tables (default %lluM; over it,\n"
		"                                     stacks end where a copy is missing)\n"
		"  --max-unwind-memory BYTES          (default %lluM)\n"
		"  --keep-exited-per-uid N            exited processes kept per uid (default %u)\n"
		"  --keep-exited-age SECONDS          and for at most this long (default %u)\n"
		"\n"
		"SIGHUP reloads the configuration file: limits, --trim, --verify-every (for\n"
		"processes that attach afterwards), --symbolizer-uids (for symbolizers started\n"
		"afterwards), --log-level, the --http, --dump and --push options take effect;\n"
		"--socket and --foreground need a restart. SIGTERM exits cleanly.\n",
		SESSION_DEFAULT_KEEP_EXITED, SYMUID_DEFAULT_FIRST, SYMUID_DEFAULT_LAST,
		DUMP_DEFAULT_KEEP, (unsigned long long)(DUMP_DEFAULT_MAX_BYTES_PER_UID >> 20),
		(unsigned long long)(DUMP_DEFAULT_MAX_BYTES >> 20), DUMP_DEFAULT_PUSH_TIMEOUT_S,
		(unsigned long long)d.per_uid[BUDGET_CONNS],
		(unsigned long long)d.total[BUDGET_CONNS],
		(unsigned long long)d.per_uid[BUDGET_SESSIONS],
		(unsigned long long)d.total[BUDGET_SESSIONS],
		(unsigned long long)d.per_uid[BUDGET_RINGS], (unsigned long long)d.total[BUDGET_RINGS],
		(unsigned long long)(d.per_uid[BUDGET_RING_BYTES] >> 20),
		(unsigned long long)(d.total[BUDGET_RING_BYTES] >> 20),
		(unsigned long long)(d.per_uid[BUDGET_BUCKET_BYTES] >> 20),
		(unsigned long long)(d.total[BUDGET_BUCKET_BYTES] >> 20),
		(unsigned long long)(d.per_uid[BUDGET_OUT_BYTES] >> 20),
		(unsigned long long)(d.per_uid[BUDGET_UNWIND_BYTES] >> 20),
		(unsigned long long)(d.total[BUDGET_UNWIND_BYTES] >> 20),
		SESSION_DEFAULT_KEEP_EXITED_PER_UID, SESSION_DEFAULT_KEEP_EXITED_AGE_S);
}

/* A decimal count with an optional K/M/G/T suffix (powers of 1024, "KiB" and "KB" alike). */
static int config_parse_size(const char *s, uint64_t *out, bool suffixes)
{
	if (!s || !*s || *s == '-')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	unsigned shift = 0;
	if (suffixes && *end) {
		switch (*end) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		case 't': case 'T': shift = 40; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (~0ull >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

static int config_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(yes); i++) {
		if (strcmp(s, yes[i]) == 0)
			return *out = true, 0;
		if (strcmp(s, no[i]) == 0)
			return *out = false, 0;
	}
	return -EINVAL;
}

/* A copy of s that lives as long as c. */
static const char *config_keep(struct config *c, const char *s)
{
	char **v = realloc(c->strings, (c->nstrings + 1) * sizeof(*v));
	if (!v)
		return NULL;
	c->strings = v;
	if (!(v[c->nstrings] = strdup(s)))
		return NULL;
	return v[c->nstrings++];
}

/* Append the comma-separated names of val to c->server.trim. */
static int config_add_trim(struct config *c, const char *val)
{
	char *copy = strdup(val);
	int rc = copy ? 0 : -1;
	for (char *save = NULL, *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc;
	     tok = strtok_r(NULL, ",", &save)) {
		char **v = realloc(c->server.trim, (c->server.ntrim + 1) * sizeof(*v));
		if (v)
			c->server.trim = v;
		if (strcmp(tok, "*") == 0 || !v || !(v[c->server.ntrim] = strdup(tok)))
			rc = -1;
		else
			c->server.ntrim++;
	}
	free(copy);
	return rc;
}

#define CONFIG_FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

/* Set one option from its text; -EINVAL with "--name: why" in err. */
static int config_set(struct config *c, const struct config_option *o, const char *val,
		      char *err, size_t errlen)
{
	uint64_t v = 0;
	bool b;
	switch (o->id) {
	case CONFIG_CONFIG:
		return 0; /* taken before the file is read */
	case CONFIG_SOCKET:
		if (!*val)
			return CONFIG_FAIL("--socket: empty path");
		if (!(c->server.socket_path = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_FOREGROUND:
		if (!val)
			b = true;
		else if (config_parse_bool(val, &b))
			return CONFIG_FAIL("--foreground: want yes or no: %s", val);
		c->foreground = b;
		break;
	case CONFIG_LOG_LEVEL:
		if (log_parse_level(val, &c->log_level))
			return CONFIG_FAIL("--log-level: want error, warn, info or debug: %s", val);
		break;
	case CONFIG_MAX_BUCKETS:
		if (config_parse_size(val, &v, false) || v == 0)
			return CONFIG_FAIL("--max-buckets: not a positive number: %s", val);
		c->server.max_buckets = v;
		break;
	case CONFIG_MAX_MEMORY:
		if (config_parse_size(val, &v, true) || v < 65536)
			return CONFIG_FAIL("--max-memory: want a size of at least 64K: %s", val);
		c->server.max_bytes = v;
		break;
	case CONFIG_KEEP_EXITED:
		if (config_parse_size(val, &v, false) || v > 1000000)
			return CONFIG_FAIL("--keep-exited: not a number up to 1000000: %s", val);
		c->server.keep_exited = (unsigned)v;
		break;
	case CONFIG_HTTP:
		if (!(c->server.http_addr = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_HTTP_UIDS:
		if (!(c->http_uids = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_HTTP_TOKEN_FILE:
		if (!(c->http_token_file = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_TRIM:
		if (config_add_trim(c, val))
			return CONFIG_FAIL("--trim: bad list '%s' (NAME or PREFIX*, comma-separated)",
					   val);
		break;
	case CONFIG_VERIFY_EVERY:
		if (config_parse_size(val, &v, false) || v == 0 || v > UINT32_MAX)
			return CONFIG_FAIL("--verify-every: not a positive number: %s", val);
		c->server.verify_every = (uint32_t)v;
		break;
	case CONFIG_KEEP_EXITED_PER_UID:
		if (config_parse_size(val, &v, false) || v == 0 || v > 1000000)
			return CONFIG_FAIL("--keep-exited-per-uid: not a number in 1..1000000: %s",
					   val);
		c->server.keep_exited_per_uid = (unsigned)v;
		break;
	case CONFIG_KEEP_EXITED_AGE:
		if (config_parse_size(val, &v, false) || v == 0 || v > 100u * 365 * 86400)
			return CONFIG_FAIL("--keep-exited-age: not a number of seconds: %s", val);
		c->server.keep_exited_age_s = (unsigned)v;
		break;
	case CONFIG_SYMBOLIZER_UIDS:
		if (symuid_parse_range(val, &c->symbolizer_uid_first, &c->symbolizer_uid_last))
			return CONFIG_FAIL("--symbolizer-uids: want FIRST-LAST, 1 <= FIRST <= LAST "
					   "< 2147483648: %s", val);
		break;
	case CONFIG_DUMP_DIR:
		if (val[0] != '/')
			return CONFIG_FAIL("--dump-dir: not an absolute path: %s", val);
		if (!(c->dump.dir = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_DUMP_EVERY:
		if (config_parse_size(val, &v, false) || v == 0 || v > 7u * 86400)
			return CONFIG_FAIL("--dump-every: not a number of seconds up to a week: %s",
					   val);
		c->dump.every_s = (unsigned)v;
		break;
	case CONFIG_DUMP_KEEP:
		if (config_parse_size(val, &v, false) || v == 0 || v > DUMP_MAX_KEEP)
			return CONFIG_FAIL("--dump-keep: not a number in 1..%u: %s", DUMP_MAX_KEEP,
					   val);
		c->dump.keep = (unsigned)v;
		break;
	case CONFIG_DUMP_MAX_BYTES_PER_UID:
	case CONFIG_DUMP_MAX_BYTES:
		if (config_parse_size(val, &v, true) || v < 4096)
			return CONFIG_FAIL("--%s: want a size of at least 4K: %s", o->name, val);
		if (o->id == CONFIG_DUMP_MAX_BYTES)
			c->dump.max_bytes = v;
		else
			c->dump.max_bytes_per_uid = v;
		break;
	case CONFIG_DUMP_OOM: {
		static const char *const modes[] = { "auto", "bpf", "cgroup", "off" };
		size_t i = 0;
		while (i < LLGO_ARRAY_SIZE(modes) && strcmp(val, modes[i]) != 0)
			i++;
		if (i == LLGO_ARRAY_SIZE(modes))
			return CONFIG_FAIL("--dump-oom: want auto, bpf, cgroup or off: %s", val);
		c->dump.oom = (int)i;
		break;
	}
	case CONFIG_PUSH:
		if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
			return CONFIG_FAIL("--push: want an http:// or https:// URL: %s", val);
		if (!(c->dump.push_url = config_keep(c, val)))
			return CONFIG_FAIL("out of memory");
		break;
	case CONFIG_PUSH_TIMEOUT:
		if (config_parse_size(val, &v, false) || v == 0 || v > 600)
			return CONFIG_FAIL("--push-timeout: not a number of seconds in 1..600: %s",
					   val);
		c->dump.push_timeout_s = (unsigned)v;
		break;
	case CONFIG_BUDGET: {
		bool bytes = o->kind == BUDGET_RING_BYTES || o->kind == BUDGET_BUCKET_BYTES ||
			     o->kind == BUDGET_OUT_BYTES || o->kind == BUDGET_UNWIND_BYTES;
		if (config_parse_size(val, &v, bytes))
			return CONFIG_FAIL("--%s: not a %s: %s", o->name, bytes ? "size" : "number",
					   val);
		if (o->per_uid)
			c->budget.per_uid[o->kind] = v;
		else
			c->budget.total[o->kind] = v;
		break;
	}
	}
	return 0;
}

static const struct config_option *config_find(const char *name, size_t len)
{
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(config_options); i++)
		if (strlen(config_options[i].name) == len &&
		    strncmp(config_options[i].name, name, len) == 0)
			return &config_options[i];
	return NULL;
}

static char *config_strip(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static int config_read_file(struct config *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return CONFIG_FAIL("%s: %s", path, strerror(errno));
	/* The file steers a daemon that reads every user's processes: only its owner (or root)
	 * may be able to change it. */
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && ((st.st_mode & (S_IWGRP | S_IWOTH)) ||
					   (st.st_uid != 0 && st.st_uid != geteuid()))) {
		fclose(f);
		return CONFIG_FAIL("%s: writable by others than its owner, or owned by uid %u: "
				   "ignored", path, (unsigned)st.st_uid);
	}
	char *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	int rc = 0;
	while (!rc && getline(&line, &cap, f) >= 0) {
		lineno++;
		char *s = config_strip(line);
		if (!*s || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		char *key = s, *val = NULL;
		if (eq) {
			*eq = '\0';
			val = config_strip(eq + 1);
		}
		key = config_strip(key);
		const struct config_option *o = config_find(key, strlen(key));
		char why[400];
		if (!o || o->id == CONFIG_CONFIG)
			rc = CONFIG_FAIL("%s:%u: unknown key '%.64s'", path, lineno, key);
		else if (!val || (!*val && !o->flag))
			rc = CONFIG_FAIL("%s:%u: %s needs a value (\"%s = VALUE\")", path, lineno,
					 key, key);
		else if (config_set(c, o, val, why, sizeof(why)) != 0)
			rc = CONFIG_FAIL("%s:%u: %s", path, lineno, why);
	}
	if (!rc && ferror(f))
		rc = CONFIG_FAIL("%s: read error", path);
	free(line);
	fclose(f);
	return rc;
}

/* The options of argv: only_config takes --config alone (and skips what it does not know,
 * the second pass reports it), else every other option is set. */
static int config_walk_args(struct config *c, int argc, char **argv, bool only_config,
			    char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			config_usage(stdout);
			exit(0);
		}
		const struct config_option *o = NULL;
		const char *val = NULL;
		if (strcmp(a, "-f") == 0) {
			o = config_find("foreground", 10);
		} else if (a[0] == '-' && a[1] == '-') {
			const char *eq = strchr(a + 2, '=');
			o = config_find(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
			if (o && eq)
				val = eq + 1;
		}
		if (!o && only_config)
			continue;
		if (!o) {
			config_usage(stderr);
			return CONFIG_FAIL("unknown option '%s'", a);
		}
		if (!val && !o->flag) {
			if (i + 1 >= argc)
				return CONFIG_FAIL("--%s needs a value", o->name);
			val = argv[++i];
		}
		if (o->id == CONFIG_CONFIG) {
			if (!*val)
				return CONFIG_FAIL("--config: empty path");
			if (only_config && !(c->path = config_keep(c, val)))
				return CONFIG_FAIL("out of memory");
			continue;
		}
		if (!only_config && config_set(c, o, val, err, errlen) != 0)
			return -EINVAL;
	}
	return 0;
}

bool config_use_default(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--socket") == 0 || strncmp(argv[i], "--socket=", 9) == 0)
			return listen_activated();
	return true;
}

int config_load(struct config *c, int argc, char **argv, bool use_default, char *err,
		size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->server.keep_exited = SESSION_DEFAULT_KEEP_EXITED;
	c->log_level = LOG_LEVEL_INFO;
	c->symbolizer_uid_first = SYMUID_DEFAULT_FIRST;
	c->symbolizer_uid_last = SYMUID_DEFAULT_LAST;
	budget_defaults(&c->budget);
	c->server.budget = &c->budget;
	int rc = config_walk_args(c, argc, argv, true, err, errlen);
	if (!rc && !c->path && use_default && access(CONFIG_DEFAULT_PATH, F_OK) == 0 &&
	    !(c->path = config_keep(c, CONFIG_DEFAULT_PATH)))
		rc = CONFIG_FAIL("out of memory");
	if (!rc && c->path)
		rc = config_read_file(c, c->path, err, errlen);
	if (!rc)
		rc = config_walk_args(c, argc, argv, false, err, errlen);
	if (!rc && c->dump.every_s && !c->dump.dir && !c->dump.push_url)
		rc = CONFIG_FAIL("--dump-every needs --dump-dir or --push");
	if (!rc && c->dump.push_url && !c->dump.every_s)
		rc = CONFIG_FAIL("--push needs --dump-every");
	if (!rc && !c->server.socket_path) {
		const char *env = getenv("LLGO_HEAP_SOCKET");
		const char *xdg = getenv("XDG_RUNTIME_DIR");
		char buf[4096];
		if (env && *env) {
			c->server.socket_path = config_keep(c, env);
		} else if (geteuid() == 0) {
			c->server.socket_path = "/run/llgo-heapd/llgo-heapd.sock";
		} else if (xdg && *xdg) {
			snprintf(buf, sizeof(buf), "%s/llgo-heapd.sock", xdg);
			c->server.socket_path = config_keep(c, buf);
		} else {
			rc = CONFIG_FAIL("no socket: pass --socket PATH or set XDG_RUNTIME_DIR");
		}
		if (!rc && !c->server.socket_path)
			rc = CONFIG_FAIL("out of memory");
	}
	if (rc) {
		config_free(c);
		return 2;
	}
	return 0;
}

void config_free(struct config *c)
{
	for (size_t i = 0; i < c->server.ntrim; i++)
		free(c->server.trim[i]);
	free(c->server.trim);
	for (size_t i = 0; i < c->nstrings; i++)
		free(c->strings[i]);
	free(c->strings);
	memset(c, 0, sizeof(*c));
}
