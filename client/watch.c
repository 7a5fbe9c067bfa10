// SPDX-License-Identifier: MIT
/*
 * watch.c: `llgo-heap top PID --watch [SECONDS]`, a live view of a process's allocation sites
 * that redraws like top(1).
 *
 * Every interval the CLI fetches the process's sites (LLGO_FORMAT_SITES: scaled alloc and
 * in-use values per site, top.c) and shows, per site: in-use space and objects, allocation
 * rate (allocated bytes per second since the last refresh) and growth (in-use space now minus
 * at the first refresh). Sorted by in-use space; keys: `a` sort by alloc rate, `i` by in-use
 * space, `o` by in-use objects, `g` by growth, `q` (or Ctrl-C) quits.
 *
 * On a terminal the view takes the alternate screen, hides the cursor and puts stdin in
 * non-canonical, no-echo mode; all three are undone on every way out (q, Ctrl-C, SIGTERM,
 * SIGHUP, an error), so the terminal is left as it was found. When stdout is not a terminal
 * the same table is printed as plain lines, one block per refresh, until the process exits or
 * the watch is interrupted. When the process exits the view shows its final state (the
 * leaks at exit) and says so. Fetching is left to the caller (cli.c).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

struct watch_site {
	char *name;
	int64_t ao, ab, io, ib;   /* now */
	int64_t prev_ab;          /* at the previous refresh */
	int64_t base_ib;          /* at the first refresh (0 for sites that appeared later) */
	double rate;              /* allocated bytes per second since the previous refresh */
	bool seen;                /* present in the latest fetch */
};

struct watch {
	struct watch_site *s;
	size_t n, cap;
	char sort; /* 'i', 'o', 'a', 'g' */
	bool first;
	char acct[256];
};

static volatile sig_atomic_t watch_stop;
static volatile sig_atomic_t watch_resized;

static void watch_on_signal(int sig)
{
	if (sig == SIGWINCH)
		watch_resized = 1;
	else
		watch_stop = 1;
}

static struct watch_site *watch_find(struct watch *w, const char *name, bool *created)
{
	*created = false;
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->s[i].name, name) == 0)
			return &w->s[i];
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 64;
		struct watch_site *ns = realloc(w->s, nc * sizeof(*ns));
		if (!ns)
			return NULL;
		w->s = ns;
		w->cap = nc;
	}
	struct watch_site *s = &w->s[w->n];
	memset(s, 0, sizeof(*s));
	s->name = strdup(name);
	if (!s->name)
		return NULL;
	w->n++;
	*created = true;
	return s;
}

/* Fold one SITES answer into w; dt_s seconds since the previous one. */
static int watch_update(struct watch *w, const struct buf *b, double dt_s)
{
	for (size_t i = 0; i < w->n; i++)
		w->s[i].seen = false;
	const char *p = (const char *)b->data, *end = p + b->len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[1024];
		if (len >= sizeof(line))
			len = sizeof(line) - 1;
		memcpy(line, p, len);
		line[len] = '\0';
		p = nl ? nl + 1 : end;
		if (line[0] == '#') {
			size_t l = strlen(line) < sizeof(w->acct) - 1 ? strlen(line) : sizeof(w->acct) - 1;
			memcpy(w->acct, line, l);
			w->acct[l] = '\0';
			continue;
		}
		long long ao, ab, io, ib;
		int off = 0;
		if (sscanf(line, "%lld\t%lld\t%lld\t%lld\t%n", &ao, &ab, &io, &ib, &off) != 4 || !off)
			continue;
		bool created;
		struct watch_site *s = watch_find(w, line + off, &created);
		if (!s)
			return -ENOMEM;
		/* A site of the first refresh is the baseline; one that appeared later
		 * allocated everything it has since the previous refresh and grew from 0. */
		s->prev_ab = created ? (w->first ? ab : 0) : s->ab;
		if (created && w->first)
			s->base_ib = ib;
		s->ao = ao;
		s->ab = ab;
		s->io = io;
		s->ib = ib;
		s->rate = dt_s > 0 ? (double)(ab - s->prev_ab) / dt_s : 0;
		s->seen = true;
	}
	w->first = false;
	return 0;
}

static int64_t watch_key(const struct watch *w, const struct watch_site *s, double *rate)
{
	switch (w->sort) {
	case 'o':
		return s->io;
	case 'a':
		*rate = s->rate;
		return 0;
	case 'g':
		return s->ib - s->base_ib;
	default:
		return s->ib;
	}
}

static const struct watch *watch_sorting;

static int watch_cmp(const void *x, const void *y)
{
	const struct watch_site *a = x, *b = y;
	double ra = 0, rb = 0;
	int64_t ka = watch_key(watch_sorting, a, &ra), kb = watch_key(watch_sorting, b, &rb);
	if (ra != rb)
		return ra > rb ? -1 : 1;
	if (ka != kb)
		return ka > kb ? -1 : 1;
	return strcmp(a->name, b->name);
}

static const char *watch_sort_name(char c)
{
	switch (c) {
	case 'o':
		return "inuse objects";
	case 'a':
		return "alloc rate";
	case 'g':
		return "growth";
	default:
		return "inuse space";
	}
}

/* Draw into b: at most rows lines of sites (0: all) and cols columns (0: no limit). */
static void watch_draw(struct watch *w, struct buf *b, pid_t pid, double interval, bool exited,
		       size_t rows, size_t cols, bool tty)
{
	watch_sorting = w;
	if (w->n > 1)
		qsort(w->s, w->n, sizeof(*w->s), watch_cmp);
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	char ts[32];
	strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
	int64_t tin = 0, tio = 0;
	double trate = 0;
	for (size_t i = 0; i < w->n; i++) {
		tin += w->s[i].ib;
		tio += w->s[i].io;
		trate += w->s[i].rate;
	}
	char a[32], r[32];
	human_bytes(a, sizeof(a), (double)tin, "");
	human_bytes(r, sizeof(r), trate, "/s");
	char line[2048];
	size_t lines = 0;
#define WATCH_LINE(...)                                                                    \
	do {                                                                               \
		int k_ = snprintf(line, sizeof(line), __VA_ARGS__);                       \
		size_t l_ = k_ < 0 ? 0 : (size_t)k_;                                        \
		if (l_ >= sizeof(line))                                                    \
			l_ = sizeof(line) - 1;                                             \
		if (cols && l_ > cols)                                                     \
			l_ = cols;                                                         \
		buf_append(b, line, l_);                                                   \
		buf_puts(b, tty ? "\033[K\r\n" : "\n");                                     \
		lines++;                                                                   \
	} while (0)
	WATCH_LINE("llgo-heap top: pid %d%s  %s  every %.1fs  in use %s in %lld objects, "
		   "allocating %s", (int)pid, exited ? " (exited: in use = never freed)" : "", ts,
		   interval, a, (long long)tio, r);
	WATCH_LINE("sorted by %s   keys: i inuse  o objects  a alloc rate  g growth  q quit",
		   watch_sort_name(w->sort));
	WATCH_LINE("%12s %12s %14s %12s  %s", "INUSE_SPACE", "INUSE_OBJS", "ALLOC_RATE", "GROWTH",
		   "SITE");
	for (size_t i = 0; i < w->n; i++) {
		if (rows && lines + 1 >= rows)
			break;
		const struct watch_site *s = &w->s[i];
		char is[32], ar[32], gr[32];
		human_bytes(is, sizeof(is), (double)s->ib, "");
		human_bytes(ar, sizeof(ar), s->rate, "/s");
		human_bytes(gr, sizeof(gr), (double)(s->ib - s->base_ib), "+");
		WATCH_LINE("%12s %12lld %14s %12s  %s", is, (long long)s->io, ar, gr, s->name);
	}
	if (!rows || lines + 1 < rows)
		WATCH_LINE("%s", w->acct);
#undef WATCH_LINE
}

int watch_run(pid_t pid, double interval, watch_fetch_fn fetch, void *arg)
{
	bool tty = isatty(STDOUT_FILENO);
	bool keys = tty && isatty(STDIN_FILENO);
	struct termios saved;
	bool restored = true;
	struct sigaction sa, old_int, old_term, old_hup, old_winch;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watch_on_signal;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	sigaction(SIGWINCH, &sa, &old_winch);
	watch_stop = 0;
	if (keys && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
			restored = false;
	}
	if (tty) {
		fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
		fflush(stdout);
	}

	struct watch w = { .sort = 'i', .first = true };
	struct buf b, screen;
	buf_init(&b);
	buf_init(&screen);
	int rc = 0;
	struct timespec last;
	clock_gettime(CLOCK_MONOTONIC, &last);
	bool exited = false, drawn_exit = false;
	while (!watch_stop) {
		buf_reset(&b);
		bool now_exited = false;
		rc = fetch(arg, pid, &b, &now_exited);
		if (rc)
			break;
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		double dt = (double)(t.tv_sec - last.tv_sec) + (double)(t.tv_nsec - last.tv_nsec) / 1e9;
		last = t;
		if (!exited || !drawn_exit) {
			if ((rc = watch_update(&w, &b, w.first ? 0 : dt)))
				break;
		}
		exited = now_exited;
	redraw:
		buf_reset(&screen);
		size_t rows = 0, cols = 0;
		struct winsize ws;
		if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
			rows = ws.ws_row;
			cols = ws.ws_col;
		}
		if (tty)
			buf_puts(&screen, "\033[H");
		watch_draw(&w, &screen, pid, interval, exited, rows, cols, tty);
		if (tty)
			buf_puts(&screen, "\033[J");
		else
			buf_putc(&screen, '\n');
		fwrite(screen.data, 1, screen.len, stdout);
		fflush(stdout);
		if (exited && !tty)
			break; /* plain lines: the final state was printed */
		drawn_exit = exited;
		/* Wait for the interval, a key, or a signal. */
		int64_t left_ms = (int64_t)(interval * 1000);
		struct timespec w0;
		clock_gettime(CLOCK_MONOTONIC, &w0);
		bool again = false;
		while (!watch_stop && left_ms > 0) {
			struct pollfd pf = { .fd = STDIN_FILENO, .events = POLLIN };
			int pr = poll(&pf, keys ? 1 : 0, (int)left_ms);
			if (watch_resized) {
				watch_resized = 0;
				again = true;
				break;
			}
			if (pr > 0 && (pf.revents & POLLIN)) {
				char c;
				if (read(STDIN_FILENO, &c, 1) == 1) {
					if (c == 'q' || c == 'Q' || c == 3) {
						watch_stop = 1;
						break;
					}
					if (strchr("ioag", c)) {
						w.sort = c;
						again = true;
						break;
					}
				}
			} else if (pr > 0) {
				keys = false; /* stdin closed */
			}
			struct timespec t1;
			clock_gettime(CLOCK_MONOTONIC, &t1);
			left_ms = (int64_t)(interval * 1000) -
				  ((int64_t)(t1.tv_sec - w0.tv_sec) * 1000 +
				   (t1.tv_nsec - w0.tv_nsec) / 1000000);
		}
		if (again && !watch_stop)
			goto redraw;
	}

	if (tty) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
	}
	if (!restored)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	sigaction(SIGWINCH, &old_winch, NULL);
	for (size_t i = 0; i < w.n; i++)
		free(w.s[i].name);
	free(w.s);
	buf_free(&b);
	buf_free(&screen);
	return rc;
}
