// SPDX-License-Identifier: MIT
/*
 * alloc_driver.c: runs alloc_bench (and go_alloc_bench) under every configuration of a set,
 * interleaved round by round so that the machine's drift hits all configurations alike, and
 * prints ns/op and paired ratios.
 *
 * A round runs, for each workload variant, every configuration once as its own process, in
 * an order rotated by one each round (no configuration is always first or always last).
 * Each process prints the median of its measured batches; the driver reports, per variant
 * and configuration, the median of those process medians, their min and max, and the ratio
 * to the configuration's baseline computed pair by pair within a round (median, min, max of
 * the per-round ratios). The baseline of a profiler is its own allocator without profiling.
 *
 * Configurations marked slow (recording every allocation with a DWARF unwinder: jemalloc
 * lg_prof_sample:0, gperftools HEAPPROFILE, Go MemProfileRate=1) run the same batches of
 * 250,000 pairs, but 1 warm-up and 5 measured batches, only in the first --slow-rounds
 * rounds and only on the single-threaded variants: at 2-10 us per pair a full 66-batch run
 * takes minutes per process. Their ratios pair them with the baseline of the same round.
 *
 * The driver owns no daemon: the caller (bench.sh) starts a private llgo-heapd and passes
 * its socket. The driver only sets the environment of each child, waits for it, and
 * reads its RESULT line. Children are waited for by pid; nothing is killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CONFIGS 24
#define MAX_ROUNDS 101
#define MAX_ENV 6
#define MAX_PREFIX 6

enum kind { K_C, K_GO };

struct config {
	const char *name;
	const char *base; /* name of the baseline configuration (itself for a baseline) */
	enum kind kind;
	int slow;
	const char *env[MAX_ENV];       /* NAME=VALUE, set in the child */
	const char *prefix[MAX_PREFIX]; /* wrapper command (heaptrack) */
	const char *go_rate;            /* K_GO: -rate value */
	int base_idx;
	/* results [variant][round] */
	double med[3][MAX_ROUNDS];
	int have[3][MAX_ROUNDS];
	long pid[3][MAX_ROUNDS];
};

struct variant {
	const char *name; /* small, mixed, threads */
	const char *wl;
	int threads;
};

static const struct variant variants_all[3] = {
	{ "16B", "small", 1 },
	{ "mixed", "mixed", 1 },
	{ "16B-2thr", "small", 2 },
};

static struct config configs[MAX_CONFIGS];
static int nconfigs;
static int variant_on[3] = { 1, 1, 1 };

static struct {
	const char *bench, *go_bench, *shim, *socket, *tmp, *passthrough;
	const char *jemalloc, *tcmalloc, *heaptrack;
	const char *set;
	int rounds, slow_rounds;
	int warmup, batches;
	long batch;
	const char *pids_file;
} opt = { .rounds = 11, .slow_rounds = 3, .warmup = 5, .batches = 61, .batch = 250000 };

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		perror("vasprintf");
		exit(1);
	}
	va_end(ap);
	return s;
}

static struct config *add(const char *name, const char *base, enum kind k, int slow)
{
	if (nconfigs >= MAX_CONFIGS) {
		fprintf(stderr, "alloc_driver: too many configurations\n");
		exit(1);
	}
	struct config *c = &configs[nconfigs++];
	memset(c, 0, sizeof(*c));
	c->name = name;
	c->base = base;
	c->kind = k;
	c->slow = slow;
	return c;
}

static void setenv2(struct config *c, const char *e)
{
	for (int i = 0; i < MAX_ENV; i++)
		if (!c->env[i]) {
			c->env[i] = e;
			return;
		}
	exit(1);
}

static void build_set(void)
{
	int peers = strcmp(opt.set, "peers") == 0;
	add("glibc", "glibc", K_C, 0);
	if (opt.passthrough) {
		struct config *c = add("passthrough (floor)", "glibc", K_C, 0);
		setenv2(c, xasprintf("LD_PRELOAD=%s", opt.passthrough));
	}
	if (opt.shim && opt.socket) {
		const char *pre = xasprintf("LD_PRELOAD=%s", opt.shim);
		const char *sock = xasprintf("LLGO_HEAP_SOCKET=%s", opt.socket);
		static const char *names[3] = { "llgo rate 0", "llgo default", "llgo rate 1" };
		static const char *rates[3] = { "LLGO_HEAP_RATE=0", "LLGO_HEAP_RATE=524288",
						"LLGO_HEAP_RATE=1" };
		for (int i = 0; i < 3; i++) {
			struct config *c = add(names[i], "glibc", K_C, 0);
			setenv2(c, pre);
			setenv2(c, sock);
			setenv2(c, rates[i]);
		}
		/* At rate 1 a 256 KiB ring fills between two passes of the daemon's drain (1 ms
		 * apart when busy) and most records are dropped, which is cheaper than pushing
		 * them; the largest ring shows the cost of recording every allocation. */
		struct config *c = add("llgo rate 1, 64 MiB ring", "glibc", K_C, 0);
		setenv2(c, pre);
		setenv2(c, sock);
		setenv2(c, rates[2]);
		setenv2(c, "LLGO_HEAP_RING_KB=65536");
	}
	if (!peers)
		return;
	if (opt.heaptrack) {
		struct config *c = add("heaptrack", "glibc", K_C, 0);
		c->prefix[0] = opt.heaptrack;
		c->prefix[1] = "-o";
		c->prefix[2] = NULL; /* filled per run: a unique output file in tmp */
	}
	if (opt.jemalloc) {
		const char *pre = xasprintf("LD_PRELOAD=%s", opt.jemalloc);
		struct config *c = add("jemalloc", "jemalloc", K_C, 0);
		setenv2(c, pre);
		c = add("jemalloc prof lg19", "jemalloc", K_C, 0);
		setenv2(c, pre);
		setenv2(c, "MALLOC_CONF=prof:true,lg_prof_sample:19");
		c = add("jemalloc prof lg0", "jemalloc", K_C, 1);
		setenv2(c, pre);
		setenv2(c, "MALLOC_CONF=prof:true,lg_prof_sample:0");
	}
	if (opt.tcmalloc) {
		const char *pre = xasprintf("LD_PRELOAD=%s", opt.tcmalloc);
		struct config *c = add("tcmalloc", "tcmalloc", K_C, 0);
		setenv2(c, pre);
		setenv2(c, "TCMALLOC_SAMPLE_PARAMETER=0");
		c = add("tcmalloc sample 512K", "tcmalloc", K_C, 0);
		setenv2(c, pre);
		setenv2(c, "TCMALLOC_SAMPLE_PARAMETER=524288");
		c = add("tcmalloc HEAPPROFILE", "tcmalloc", K_C, 1);
		setenv2(c, pre);
		setenv2(c, "TCMALLOC_SAMPLE_PARAMETER=0");
		setenv2(c, "HEAPPROFILE=@TMP@/gperf"); /* rewritten per run */
	}
	if (opt.go_bench) {
		struct config *c = add("go rate 0", "go rate 0", K_GO, 0);
		c->go_rate = "0";
		c = add("go default", "go rate 0", K_GO, 0);
		c->go_rate = "default";
		c = add("go rate 1", "go rate 0", K_GO, 1);
		c->go_rate = "1";
	}
}

/* Run one configuration once; returns the process median or -1. */
static double run_one(struct config *c, const struct variant *v, int round, long *pid_out)
{
	char *argv[32];
	int n = 0;
	char bstr[32], wstr[16], nstr[16], tstr[16];
	int slow = c->slow;
	snprintf(bstr, sizeof(bstr), "%ld", opt.batch);
	snprintf(wstr, sizeof(wstr), "%d", slow ? 1 : opt.warmup);
	snprintf(nstr, sizeof(nstr), "%d", slow ? 5 : opt.batches);
	snprintf(tstr, sizeof(tstr), "%d", v->threads);
	char *htout = NULL;
	for (int i = 0; i < MAX_PREFIX && c->prefix[i]; i++)
		argv[n++] = (char *)c->prefix[i];
	if (c->prefix[0]) {
		htout = xasprintf("%s/heaptrack.%d.%s", opt.tmp, round, v->name);
		argv[n++] = htout;
	}
	if (c->kind == K_GO) {
		argv[n++] = (char *)opt.go_bench;
		argv[n++] = "-rate";
		argv[n++] = (char *)c->go_rate;
	} else {
		argv[n++] = (char *)opt.bench;
	}
	argv[n++] = "-w";
	argv[n++] = (char *)v->wl;
	argv[n++] = "-t";
	argv[n++] = tstr;
	argv[n++] = "-W";
	argv[n++] = wstr;
	argv[n++] = "-n";
	argv[n++] = nstr;
	argv[n++] = "-b";
	argv[n++] = bstr;
	argv[n] = NULL;

	int pfd[2];
	if (pipe(pfd) < 0) {
		perror("pipe");
		exit(1);
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		close(pfd[0]);
		dup2(pfd[1], 1);
		close(pfd[1]);
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0 && !getenv("BENCH_VERBOSE"))
			dup2(devnull, 2);
		for (int i = 0; i < MAX_ENV && c->env[i]; i++) {
			const char *e = c->env[i];
			if (strstr(e, "@TMP@")) {
				const char *eq = strchr(e, '=');
				char *val = xasprintf("%s/%s.%d.%s", opt.tmp,
						      strrchr(e, '/') + 1, round, v->name);
				char *nm = strndup(e, (size_t)(eq - e));
				setenv(nm, val, 1);
			} else {
				putenv((char *)e);
			}
		}
		execvp(argv[0], argv);
		fprintf(stderr, "alloc_driver: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	FILE *f = fdopen(pfd[0], "r");
	char line[1024];
	double med = -1;
	while (fgets(line, sizeof(line), f)) {
		char *r = strstr(line, "RESULT median=");
		if (r)
			med = atof(r + 14);
	}
	fclose(f);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "alloc_driver: %s (%s) failed: status 0x%x\n", c->name, v->name,
			st);
		med = -1;
	}
	if (htout) {
		/* heaptrack appends .zst or .gz; the traces are not needed, only the timing */
		char *cmd = xasprintf("rm -f '%s'*", htout);
		if (system(cmd) != 0)
			fprintf(stderr, "alloc_driver: could not remove %s*\n", htout);
		free(cmd);
		free(htout);
	}
	*pid_out = pid;
	return med;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(void)
{
	printf("\n");
	for (int vi = 0; vi < 3; vi++) {
		if (!variant_on[vi])
			continue;
		const struct variant *v = &variants_all[vi];
		printf("### %s (%s, %d thread%s, batches of %ld)\n\n", v->name,
		       strcmp(v->wl, "small") == 0 ? "16-byte malloc+free"
						   : "16 B..4 KiB malloc+free, mean ~740 B",
		       v->threads, v->threads > 1 ? "s" : "", opt.batch);
		int fl = -1;
		for (int k = 0; k < nconfigs; k++)
			if (strcmp(configs[k].name, "passthrough (floor)") == 0)
				fl = k;
		printf("| configuration | runs | ns/op median | min | max | baseline | "
		       "ratio median (paired) | ratio min | ratio max |%s\n",
		       fl >= 0 ? " vs floor (paired) |" : "");
		printf("|---|---:|---:|---:|---:|---|---:|---:|---:|%s\n", fl >= 0 ? "---:|" : "");
		for (int ci = 0; ci < nconfigs; ci++) {
			struct config *c = &configs[ci];
			struct config *b = &configs[c->base_idx];
			double m[MAX_ROUNDS], r[MAX_ROUNDS];
			int nm = 0, nr = 0;
			for (int k = 0; k < opt.rounds; k++) {
				if (!c->have[vi][k])
					continue;
				m[nm++] = c->med[vi][k];
				if (b->have[vi][k])
					r[nr++] = c->med[vi][k] / b->med[vi][k];
			}
			if (nm == 0)
				continue;
			double mn = m[0], mx = m[0];
			for (int k = 1; k < nm; k++) {
				if (m[k] < mn)
					mn = m[k];
				if (m[k] > mx)
					mx = m[k];
			}
			double md = median(m, nm);
			/* paired ratio to the interposition floor, for llgo's rows */
			char vsf[64] = "";
			if (fl >= 0) {
				double q[MAX_ROUNDS];
				int nq = 0;
				for (int k = 0; k < opt.rounds; k++)
					if (c->have[vi][k] && configs[fl].have[vi][k])
						q[nq++] = c->med[vi][k] / configs[fl].med[vi][k];
				if (nq && strncmp(c->name, "llgo", 4) == 0) {
					double qm = median(q, nq);
					snprintf(vsf, sizeof(vsf), " %+.1f%% |", (qm - 1) * 100);
				} else {
					snprintf(vsf, sizeof(vsf), " - |");
				}
			}
			if (c == b || nr == 0) {
				printf("| %s | %d | %.2f | %.2f | %.2f | - | 1 | - | - |%s\n", c->name,
				       nm, md, mn, mx, vsf);
				continue;
			}
			double rmd = median(r, nr);
			printf("| %s | %d | %.2f | %.2f | %.2f | %s | %.4f (%+.1f%%) | %.4f | %.4f "
			       "|%s\n",
			       c->name, nm, md, mn, mx, b->name, rmd, (rmd - 1) * 100, r[0],
			       r[nr - 1], vsf);
		}
		printf("\n");
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: alloc_driver --bench PATH [--set ours|peers] [--shim SO --socket S]\n"
		"  [--rounds N] [--slow-rounds N] [--variants 16B,mixed,16B-2thr]\n"
		"  [--warmup W] [--batches N] [--batch B] [--tmp DIR] [--pids FILE]\n"
		"  [--heaptrack PATH] [--jemalloc SO] [--tcmalloc SO] [--go PATH]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	opt.set = "ours";
	opt.tmp = "/tmp";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (strcmp(a, "--bench") == 0)
			opt.bench = v;
		else if (strcmp(a, "--go") == 0)
			opt.go_bench = v;
		else if (strcmp(a, "--passthrough") == 0)
			opt.passthrough = v;
		else if (strcmp(a, "--shim") == 0)
			opt.shim = v;
		else if (strcmp(a, "--socket") == 0)
			opt.socket = v;
		else if (strcmp(a, "--tmp") == 0)
			opt.tmp = v;
		else if (strcmp(a, "--jemalloc") == 0)
			opt.jemalloc = v;
		else if (strcmp(a, "--tcmalloc") == 0)
			opt.tcmalloc = v;
		else if (strcmp(a, "--heaptrack") == 0)
			opt.heaptrack = v;
		else if (strcmp(a, "--set") == 0)
			opt.set = v;
		else if (strcmp(a, "--rounds") == 0)
			opt.rounds = atoi(v);
		else if (strcmp(a, "--slow-rounds") == 0)
			opt.slow_rounds = atoi(v);
		else if (strcmp(a, "--warmup") == 0)
			opt.warmup = atoi(v);
		else if (strcmp(a, "--batches") == 0)
			opt.batches = atoi(v);
		else if (strcmp(a, "--batch") == 0)
			opt.batch = atol(v);
		else if (strcmp(a, "--pids") == 0)
			opt.pids_file = v;
		else if (strcmp(a, "--variants") == 0) {
			char *list = strdup(v), *save = NULL;
			for (int k = 0; k < 3; k++)
				variant_on[k] = 0;
			for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
				for (int k = 0; k < 3; k++)
					if (strcmp(t, variants_all[k].name) == 0)
						variant_on[k] = 1;
			free(list);
		} else
			usage();
	}
	if (!opt.bench || opt.rounds < 1 || opt.rounds > MAX_ROUNDS)
		usage();
	build_set();
	for (int ci = 0; ci < nconfigs; ci++) {
		configs[ci].base_idx = ci;
		for (int k = 0; k < nconfigs; k++)
			if (strcmp(configs[k].name, configs[ci].base) == 0)
				configs[ci].base_idx = k;
	}
	FILE *pids = opt.pids_file ? fopen(opt.pids_file, "w") : NULL;

	printf("alloc_driver: %d configurations, %d rounds, %d warm-up + %d measured batches of "
	       "%ld (slow configurations: 1 + 5 batches in the first %d rounds)\n",
	       nconfigs, opt.rounds, opt.warmup, opt.batches, opt.batch, opt.slow_rounds);
	for (int round = 0; round < opt.rounds; round++) {
		printf("round %d/%d:", round + 1, opt.rounds);
		fflush(stdout);
		for (int vi = 0; vi < 3; vi++) {
			if (!variant_on[vi])
				continue;
			const struct variant *v = &variants_all[vi];
			for (int j = 0; j < nconfigs; j++) {
				int ci = (j + round) % nconfigs;
				struct config *c = &configs[ci];
				if (c->slow && (round >= opt.slow_rounds || v->threads > 1))
					continue;
				long pid = 0;
				double m = run_one(c, v, round, &pid);
				if (m > 0) {
					c->med[vi][round] = m;
					c->have[vi][round] = 1;
					c->pid[vi][round] = pid;
					if (pids)
						fprintf(pids, "%ld|%s|%s\n", pid, c->name, v->name);
				}
			}
			printf(" %s", v->name);
			fflush(stdout);
		}
		printf("\n");
	}
	if (pids)
		fclose(pids);
	report();
	return 0;
}
