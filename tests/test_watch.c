// SPDX-License-Identifier: MIT
/*
 * test_watch.c: `llgo-heap top PID --watch` in a real terminal (a private tmux server: send
 * keys, capture the pane) and with stdout not a terminal (plain lines).
 *   - the view shows the sites with their in-use values, sorted by in-use space;
 *   - `a` sorts by allocation rate, `q` quits, Ctrl-C quits; both leave the terminal as it was
 *     (the primary screen back, canonical mode and echo on: `stty -a` after the watch says so);
 *   - piped, it prints plain blocks without escape sequences and stops when the process exits.
 */
#include "helpers.h"

#define PROG(name) TH_PROGS "/" name

struct tmux {
	char sock[512];
};

static void tmux_cmd(struct tmux *t, char **out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void tmux_cmd(struct tmux *t, char **out, const char *fmt, ...)
{
	char args[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	char *o = NULL;
	int rc = th_sh(&o, "tmux -S %s %s", t->sock, args);
	cr_assert_eq(rc, 0, "tmux %s: %d\n%s", args, rc, o);
	if (out)
		*out = o;
	else
		free(o);
}

/* Capture the pane until it contains want (or, with absent, until it does not), at most 10 s. */
static char *tmux_wait(struct tmux *t, const char *want, bool absent)
{
	char *o = NULL;
	for (int i = 0; i < 200; i++) {
		free(o);
		tmux_cmd(t, &o, "capture-pane -p -t w");
		bool has = strstr(o, want) != NULL;
		if (has != absent)
			return o;
		th_sleep_ms(50);
	}
	cr_assert_fail("pane never %s '%s':\n%s", absent ? "lost" : "showed", want, o);
	return o;
}

static void watch_case(const char *quit_key)
{
	struct heapd d;
	struct th_proc p;
	th_run_start(&d, NULL, &p, "1", 0, (char *[]){ PROG("inuse_sites"), "200", NULL }, NULL,
		     60000);

	struct tmux t;
	snprintf(t.sock, sizeof(t.sock), "%s/tmux.sock", d.dir);
	char script[4200];
	snprintf(script, sizeof(script), "%s/watch.sh", d.dir);
	FILE *f = fopen(script, "w");
	cr_assert(f);
	/* The shell prints a marker before and the terminal state after the watch. */
	/* (the trap keeps the script alive when Ctrl-C reaches its process group, as an
	 * interactive shell stays) */
	fprintf(f, "trap true INT\nprintf 'before-watch\\n'\n"
		   "%s/llgo-heap top %d --watch 0.2 --socket %s\n"
		   "echo \"watch-exit=$?\"\nstty -a | tr ' ' '\\n' | grep -x -e '-\\?icanon' -e "
		   "'-\\?echo' | tr '\\n' ' '\necho\nsleep 600\n",
		   TH_BIN, (int)p.pid, d.sock);
	fclose(f);
	tmux_cmd(&t, NULL, "-f /dev/null new-session -d -s w -x 160 -y 40 'sh %s'", script);

	char *pane = tmux_wait(&t, "INUSE_SPACE", false);
	cr_expect(strstr(pane, "sorted by inuse space") != NULL, "%s", pane);
	free(pane);
	/* Rows: site_grow_realloc holds 200 x 5000 bytes, the most of any site. */
	pane = tmux_wait(&t, "site_grow_realloc", false);
	const char *hdr = strstr(pane, "SITE");
	const char *first = hdr ? strchr(hdr, '\n') : NULL;
	cr_expect(first && strstr(first, "site_grow_realloc") &&
			  strstr(first, "site_grow_realloc") < strstr(first, "site_new_kept"),
		  "not sorted by in-use space:\n%s", pane);
	cr_expect(strstr(pane, "976.6KiB") != NULL, "in-use space of site_grow_realloc:\n%s",
		  pane);
	cr_expect(strstr(pane, "before-watch") == NULL, "not on the alternate screen:\n%s", pane);
	free(pane);

	tmux_cmd(&t, NULL, "send-keys -t w a");
	pane = tmux_wait(&t, "sorted by alloc rate", false);
	free(pane);
	tmux_cmd(&t, NULL, "send-keys -t w %s", quit_key);
	pane = tmux_wait(&t, "watch-exit=", false);
	cr_expect(strstr(pane, "watch-exit=0") != NULL, "%s", pane);
	cr_expect(strstr(pane, "before-watch") != NULL, "primary screen not restored:\n%s", pane);
	cr_expect(strstr(pane, "INUSE_SPACE") == NULL, "view left on screen:\n%s", pane);
	pane = tmux_wait(&t, "icanon echo", false);
	cr_expect(strstr(pane, "-icanon") == NULL && strstr(pane, "-echo ") == NULL,
		  "terminal left in raw mode:\n%s", pane);
	free(pane);
	tmux_cmd(&t, NULL, "kill-server");

	th_say(&p, "go");
	th_wait(&p, 60000);
	heapd_cleanup(&d);
}

Test(watch, q_quits_and_restores_the_terminal, .timeout = 120)
{
	watch_case("q");
}

Test(watch, ctrl_c_quits_and_restores_the_terminal, .timeout = 120)
{
	watch_case("C-c");
}

Test(watch, plain_lines_when_piped, .timeout = 120)
{
	struct heapd d;
	struct th_proc p;
	th_run_start(&d, NULL, &p, "1", 0, (char *[]){ PROG("inuse_sites"), "200", NULL }, NULL,
		     60000);
	char out[4200];
	snprintf(out, sizeof(out), "%s/watch.txt", d.dir);
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "%s/llgo-heap top %d --watch 0.2 --socket %s > %s 2>&1 &",
		 TH_BIN, (int)p.pid, d.sock, out);
	cr_assert_eq(system(cmd), 0);
	th_sleep_ms(700);
	th_say(&p, "go");
	th_wait(&p, 60000);
	/* The watch ends by itself once the process exited. */
	char *text = NULL;
	for (int i = 0; i < 200; i++) {
		free(text);
		text = th_read_file(out);
		if (text && strstr(text, "(exited"))
			break;
		th_sleep_ms(50);
	}
	cr_assert(text && strstr(text, "(exited"), "no final block:\n%s", text);
	cr_expect(strchr(text, '\033') == NULL, "escape sequences in plain output");
	/* Several blocks: the first while running, the last after exit with site_kept freed. */
	const char *last = strstr(text, "(exited");
	cr_expect(last != text, "only one block");
	const char *kept = strstr(last, "site_kept");
	cr_expect(kept != NULL, "%s", last);
	if (kept) {
		const char *bol = kept;
		while (bol > last && bol[-1] != '\n')
			bol--;
		cr_expect(strncmp(bol + strspn(bol, " "), "0B ", 3) == 0,
			  "site_kept still in use after exit: %.80s", bol);
	}
	free(text);
	heapd_cleanup(&d);
}
