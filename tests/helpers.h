/* SPDX-License-Identifier: MIT */
/*
 * helpers.h: the fixtures the tests share (helpers.c, compiled once and linked into every
 * test binary beside heapd.c's private llgo-heapd, whose header this one includes), under one
 * prefix, th_: time and deadlines; temporary folders, files and shell commands; processes and
 * servers the test starts; another user (a forked child that drops root to nobody or another
 * uid); a fake shim (its control page and ring memfds, HELLO, records written by
 * shared/ring.h's producer protocol) and a daemon with this process attached to it; memfd
 * sessions and live-object tables as an attacker makes them; programs under the shim, their
 * stdin and stdout piped; what a legacy-text profile says, and whole stacks of `llgo-heap run`;
 * profiles built by hand from return addresses of real functions; a fake llgo-heapd for the
 * shim's own tests; a dump folder's files; readers of /proc. Assertions end the test as in the
 * test files; the helpers a forked child calls say so and assert nothing.
 */
#ifndef LLGO_TESTS_HELPERS_H
#define LLGO_TESTS_HELPERS_H

/* criterion and the system headers the tests all use, in one place */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../shared/proto.h"
#include "../shared/ring.h"
#include "heapd.h"

#ifndef LLGO_BUILD_DIR
#error "LLGO_BUILD_DIR must be set by the Makefile"
#endif
#ifndef LLGO_PLAIN_SHIM
#error "LLGO_PLAIN_SHIM must be set by the Makefile"
#endif

#define TH_BIN LLGO_BUILD_DIR "/bin"
#define TH_PROGS LLGO_BUILD_DIR "/progs"
#define TH_PROGS_SRC LLGO_SRC_DIR "/tests/progs"
/* The CLI: $LLGO_TEST_CLI (another build), else the build's. */
#define TH_CLI (getenv("LLGO_TEST_CLI") ? getenv("LLGO_TEST_CLI") : TH_BIN "/llgo-heap")

/* ---- time ---------------------------------------------------------------------------------- */

long th_now_ms(void);
/* Sleeps ms, resumed after signals. */
void th_sleep_ms(long ms);
/* The sanitizers the daemon and this test run under ("" for none): from `make unit`. */
const char *th_san(void);
bool th_san_thread(void);

/* ---- folders, files, commands -------------------------------------------------------------- */

/* A private folder per test (malloc'ed path); th_rmdir removes it (unless LLGO_KEEP_TMP is
 * set) and frees the path. */
char *th_tmpdir(void);
void th_rmdir(char *dir);
/* The whole file, NUL-terminated and malloc'ed; th_read_file: NULL when it cannot be read,
 * th_read_all: "" then. */
char *th_read_file(const char *path);
char *th_read_all(const char *path);
/* path mapped read-only (private); its size in *size. Asserts; munmap when done. */
unsigned char *th_map_file(const char *path, size_t *size);
/* Write text (or the n bytes at p) to path (created 0644 or truncated); asserts. */
void th_write_file(const char *path, const char *text);
void th_write_bytes(const char *path, const void *p, size_t n);
/* How many times needle occurs in s. */
int th_count(const char *s, const char *needle);
/* Run a shell command, capture stdout and stderr together (malloc'ed, NUL-terminated, when
 * out) and return its exit status (128+signal when killed). */
int th_sh(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- processes ----------------------------------------------------------------------------- */

/* fork, asserting it worked: 0 in the child, its pid in the parent. */
pid_t th_fork(void);
/* pipe, asserting it worked. */
void th_pipe(int p[2]);
/* A server the test runs (argv, found on PATH when argv[0] has no slash), its stdout and
 * stderr in log (appended to, or truncated first), never profiled (no LD_PRELOAD), and
 * taken down with the test (deathsig, PR_SET_PDEATHSIG). Its pid; stop it by pid. */
pid_t th_spawn_logged(char *const argv[], const char *log, bool append, int deathsig);

/* `go tool pprof ARGS` (fmt and what follows) run in dir, with dir as its HOME and cache:
 * its exit status; stdout and stderr in *out (malloc'ed). */
int th_pprof(char **out, const char *dir, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- another user -------------------------------------------------------------------------- */

uid_t th_nobody_uid(void);
gid_t th_nobody_gid(void);
/* In a forked child: become an ordinary process of uid (groups dropped; _exit(120) when that
 * fails). The uid change leaves a process not dumpable (its /proc files root's, the daemon
 * refuses to read it), which a program the user starts is not: it is made dumpable again. */
void th_become_uid(uid_t uid, gid_t gid);
void th_become_nobody(void);
/* Skip the test unless it runs as root. */
void th_need_root(void);
/* A setuid-root copy of sleep in dir, its path in out (root can make one; nobody runs it). */
void th_make_setuid_sleep(const char *dir, char *out, size_t n);
/* Wait (10 s at most) for one byte, or EOF (the writer exec'd or exited), on fd. */
bool th_wait_fd(int fd);
/* Read fd until EOF: a child blocks here until the test closes the write end. */
void th_hold(int fd);
/* SIGKILL pid (when > 0) and reap it. */
void th_kill(pid_t pid);

/* ---- a fake shim --------------------------------------------------------------------------- */

/* Real code addresses for the fake records: each body is longer than TH_RET's offset. */
void th_site_alpha(void);
void th_site_beta(void);
void th_site_caller(void);
/* A return address inside f (a few bytes past its entry). */
#define TH_RET(f) ((uint64_t)(uintptr_t)(f) + 4)

/* A ring as the shim makes one: its own memfd, the producer's counters beside it. */
struct th_ring {
	int fd;
	uint32_t id;
	struct llgo_ring_header *hdr;
	unsigned char *data;
	uint64_t size, head, sampled, dropped;
};

/* A shim's connection and control page. */
struct th_shim {
	int sock;
	int ctl_fd;
	struct llgo_ctl *ctl;
};

/* A sealed memfd of size bytes. */
int th_memfd_sized(const char *name, size_t size);
/* sh's control page (not connected yet). */
void th_shim_ctl(struct th_shim *sh, uint32_t ring_data_size, int64_t rate_word);
/* A mapping of fd's control page with its magic, version, size and rate_word set; NULL when
 * fd cannot be mapped. */
struct llgo_ctl *th_ctl_page(int fd, int64_t rate_word);
/* The control page laid out in a mapping of fd as a shim fills it (rate_word asked and in
 * force); NULL when fd cannot be mapped. For forked children: no assertions. */
struct llgo_ctl *th_ctl_map(int fd, uint32_t ring_data_size, int64_t rate_word);
void th_hello_init(struct llgo_msg_hello *m, uint32_t ring_data_size, int64_t rate_word);
/* Wait for one packet of type `type` on s; its status field (END/HELLO_ACK), or -errno. */
int th_wait_reply(int s, uint16_t type);
/* Connect and attach as a shim; the HELLO_ACK status. */
int th_shim_attach(struct th_shim *sh, const char *sock, uint32_t ring_data_size,
		   int64_t rate_word);
/* Attach (rate_word) and add ring 0 of data_size bytes: 0, or what failed (HELLO_ACK's
 * status or -errno). No assertion beyond the memfds': forked children call it. */
int th_shim_open(struct th_shim *sh, struct th_ring *r, const char *sock, uint32_t data_size,
		 int64_t rate_word);
void th_ring_new(struct th_ring *r, uint32_t id, uint32_t data_size);
int th_shim_add_ring(struct th_shim *sh, struct th_ring *r);
/* Add n fresh rings (ids 0..n-1): 0, or -1 when one could not be sent. */
int th_shim_add_rings(struct th_shim *sh, uint32_t n);
/* The producer of shared/ring.h: bytes, release head, release sampled; a full ring drops
 * (release dropped, then release sampled). corrupt: a wrong checksum. */
bool th_ring_push(struct th_ring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		  uint64_t rate, bool corrupt);
/* th_ring_push, and with regs an ALLOC_RAW record: the frames, then the registers and
 * regs->stack_len bytes of stack (4096 at most), which the checksum leaves out. */
bool th_ring_push_rec(struct th_ring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		      uint64_t rate, bool corrupt, const struct llgo_raw_regs *regs,
		      const unsigned char *stack);
/* Push n records, waiting for the daemon to make room when the ring is full. */
void th_ring_push_n(struct th_ring *r, const uint64_t *frames, uint16_t nf, uint64_t size,
		    uint64_t rate, unsigned n);
/* n records of n distinct stacks (alpha, a made-up caller i, caller), sizes 64 + i. */
void th_ring_push_distinct(struct th_ring *r, unsigned n);
void th_shim_close(struct th_shim *sh);
bool th_accounting_holds(const struct llgo_list_entry *e);
/* Poll LIST until the daemon has drained `want` delivered records of pid; asserts. */
struct llgo_list_entry th_wait_delivered(const char *sock, pid_t pid, uint64_t want);
/* Poll LIST (timeout_ms at most) until pid is listed in state; false when it never was. */
bool th_wait_state(const char *sock, pid_t pid, uint32_t state, long timeout_ms);
/* Poll LIST (timeout_ms at most) until pid is listed; false when it never was. */
bool th_wait_listed(const char *sock, pid_t pid, long timeout_ms);
/* The log of d (the whole file) once it holds needle, polled for timeout_ms at most; the log
 * as it then was otherwise. malloc'ed. */
char *th_wait_log(const struct heapd *d, const char *needle, long timeout_ms);
/* Rows of LIST of uid in state; the budget flags of those rows or'ed into *flags. */
int th_count_state(const char *sock, uid_t uid, uint32_t state, uint32_t *flags);

/* The usual start of a black-box test: a private daemon (extra options, may be NULL), and
 * this process attached to it as a fake shim (rate_word) with ring 0 of ring_data_size
 * bytes. */
struct th_attached {
	struct heapd d;
	struct th_shim sh;
	struct th_ring r;
};
void th_attached_start(struct th_attached *t, const char *const *extra, uint32_t ring_data_size,
		       int64_t rate_word);
/* th_attached_start without the ring: this process attached (rate_word, rings of the
 * smallest size announced) and nothing more. */
void th_attached_shim(struct th_attached *t, const char *const *extra, int64_t rate_word);
/* Close the shim's connection, stop the daemon cleanly and remove its folder. */
void th_attached_end(struct th_attached *t);

/* HELLO on s with a fresh control page (rate 512, the smallest rings) and no answer asked
 * for; its descriptor and mapping in *ctl_fd and *ctl when not NULL. For forked children: -1
 * on failure, no assertions. */
int th_hello_noack(int s, int *ctl_fd, struct llgo_ctl **ctl);
/* A process of uid (forked; th_become_uid) attached as a shim with nrings rings of the
 * smallest size, alive until the write end of go is closed. */
pid_t th_ring_taker(const struct heapd *d, uid_t uid, uint32_t nrings, const int go[2]);
/* The rings pid holds once the daemon took or refused all nrings of them. */
uint32_t th_rings_taken(const struct heapd *d, pid_t pid, uint32_t nrings);

/* ---- memfd sessions: the process memfd and the live-object table ---------------------------- */

/* A process memfd as the shim makes it: its control page at offset 0, sealed against
 * shrinking. For forked children: -1 on failure. */
int th_proc_memfd(void);
/* Connect and say HELLO with the process memfd `memfd`: the socket (or -1). With status,
 * wait for the answer and put its status there (0: attached); without, ask for none (as the
 * shim does: a HELLO that joins a session is not answered). */
int th_memfd_hello(const char *sock, int memfd, int *status);
/* ADD_LIVE with the table `live` on the shim connection sock. */
int th_add_live(int sock, int live);
/* A live-object table (sealed memfd) whose first `slots` slots each hold an object no bucket
 * has; top at the last level. -1 on failure. */
int th_live_table(uint64_t slots);
/* The time from pid's exit (reaped by the caller just before) until LIST shows it exited,
 * polled for at most wait_ms; wait_ms + 1 when it never did. */
long th_ms_until_exited(const char *sock, pid_t pid, long wait_ms);

/* ---- programs ------------------------------------------------------------------------------ */

/* Start argv with extra environment (NULL-terminated "K=V" list), stdin and stdout piped. */
pid_t th_spawn(char *const argv[], char *const env[], FILE **in, FILE **out);

struct th_proc {
	pid_t pid;
	FILE *in, *out;
	char line[512]; /* th_ready's */
};

/* Start argv under the shim with the daemon d, rate and ring size (KiB, 0: default), plus
 * extra "K=V" settings (NULL-terminated, may be NULL). preload overrides LD_PRELOAD. */
void th_start(struct th_proc *p, const struct heapd *d, const char *rate, unsigned ring_kb,
	      const char *preload, char *const argv[], const char *const *extra);
/* Run prog with one argument under the shim at rate 1 on d's socket, as uid (0: root; any
 * other: nobody), its stdout to /dev/null; its pid once it has exited with status 0 (its
 * session stays for snapshots). */
pid_t th_run_profiled(const struct heapd *d, uid_t uid, const char *prog, const char *arg);
/* The start of most end-to-end tests: a private daemon d (options opts, may be NULL), and
 * argv started on it under the shim as th_start does (rate, ring KiB, settings env), once it
 * wrote its first line (within ready_ms; in p->line). */
void th_run_start(struct heapd *d, const char *const *opts, struct th_proc *p, const char *rate,
		  unsigned ring_kb, char *const argv[], const char *const *env, int ready_ms);
/* Send line (a newline added) to the program's stdin. */
void th_say(struct th_proc *p, const char *line);
/* Read one line of the program's stdout into line (without the newline); false at EOF or
 * after timeout_ms. */
bool th_read_line(struct th_proc *p, char *line, size_t cap, int timeout_ms);
/* The program's next line of stdout (in p->line, without the newline); asserts one came
 * within timeout_ms (its "ready", mostly). */
const char *th_ready(struct th_proc *p, int timeout_ms);
/* Send cmd (a line) to the program, and th_ready its answer. */
const char *th_ask(struct th_proc *p, const char *cmd, int timeout_ms);
/* Everything left on the program's stdout (until EOF or timeout_ms), malloc'ed. */
char *th_read_rest(struct th_proc *p, int timeout_ms);
/* Close its stdin and wait for the program; its wait status, or -1 after timeout_ms (it is
 * then killed). */
int th_wait(struct th_proc *p, int timeout_ms);
/* Everything the program writes to stdout until EOF (timeout_ms at most), malloc'ed, then
 * th_wait's status in *status (the same timeout again). */
char *th_output(struct th_proc *p, int timeout_ms, int *status);
/* th_output of a program that must exit with status 0 (asserted, its output in the
 * message). */
char *th_finish(struct th_proc *p, int timeout_ms);
/* The COUNT of "site NAME [SIZE] COUNT" in a program's output (-1 when absent). */
long th_site_truth(const char *out, const char *name);

/* ---- what a legacy-text profile says --------------------------------------------------------- */

/* One record of Go's legacy heap text. */
struct th_text_rec {
	long inuse_objects, inuse_bytes, alloc_objects, alloc_bytes;
	char frame0[256]; /* function of the first "#\t0x..\tfunc+0x.." line */
	char loc0[512];   /* its "file:line" */
};

/* Parse the legacy text in s: the header's period (N in heap/N) and the records. */
int th_parse_text(const char *s, long *period, struct th_text_rec *recs, int max);
/* Sum alloc objects of records whose frame 0 is func and whose block size is size (0: any). */
long th_recs_count(const struct th_text_rec *r, int n, const char *func, long size);

struct th_acct {
	unsigned long long sampled, delivered, dropped, corrupt;
};

/* pid's legacy-text profile from the daemon on sock (malloc'ed), checked to hold every record
 * the program made: truth allocations at site (frame 0) of size bytes, and every sample
 * delivered (none dropped or corrupt); its accounting in *a (when not NULL). what names the
 * run in the messages. */
char *th_expect_exact(const char *sock, pid_t pid, const char *site, long size, long truth,
		      const char *what, struct th_acct *a);

/* Go's scaleHeapSample: count objects of size bytes sampled at rate, as the estimates Go's
 * tools print (truncated to whole numbers as Go's int64s). */
void th_go_scale(double count, double size, double rate, double *c, double *s);


/* The "# llgo-heap: sampled=..." line's counts; false when there is none. */
bool th_text_acct(const char *text, struct th_acct *a);
/* What the legacy-text accounting line says beyond the four totals: the number after " key="
 * (0 when absent). */
unsigned long long th_acct_field(const char *text, const char *key);
/* Allocations at function func (frame 0) in a legacy-text profile, of size bytes (0: any). */
long th_text_count(const char *text, const char *func, long size);
/* Sum of allocated objects over every record of the profile. */
long th_text_total(const char *text);

/* ---- profiles built by hand: return addresses of real functions ----------------------------- */

/* th_pc_outer(pcs, which) calls th_pc_site_a (which 0), th_pc_site_b (1) or
 * th_pc_site_with_a_much_longer_name_for_tabs (2, whose call goes through the inlined
 * th_pc_inlined); each calls th_pc_capture. Then pcs[0] is a return address in the site (in
 * th_pc_inlined for 2), pcs[1] one in th_pc_outer, pcs[2] one in th_pc_outer's caller. */
void th_pc_capture(uint64_t *pcs);
void th_pc_site_a(uint64_t *pcs);
void th_pc_site_b(uint64_t *pcs);
void th_pc_site_with_a_much_longer_name_for_tabs(uint64_t *pcs);
void th_pc_outer(uint64_t *pcs, int which);
/* The line of helpers.c where th_pc_site_a calls th_pc_capture (its pcs[0]'s line). */
extern const int th_pc_site_a_call_line;

struct stack; /* agent/internal.h's */
/* A stack of the n addresses pcs (calloc'ed). */
struct stack *th_stack(const uint64_t *pcs, uint32_t n);
/* The stack th_pc_outer(which) captures. */
struct stack *th_pc_stack(int which);

/* A sample line of `go tool pprof -raw`: "  v0  v1  v2  v3: id id ..." */
struct th_raw_sample {
	long long v[4];
	int nlocs; /* location ids */
};

/* The sample lines of `go tool pprof -raw`'s output s, the first max of them in out; how many
 * were put there. */
int th_raw_samples(const char *s, struct th_raw_sample *out, int max);

/* ---- profiles with whole stacks: `llgo-heap run` and Go's legacy text ----------------------- */

#define TH_RUN TH_BIN "/llgo-heap run"
#define TH_PROF_MAX_FRAMES 300
#define TH_PROF_MAX_RECS 4096

struct th_frame {
	char func[160];
	char file[160]; /* basename, "" when unknown */
	int line;
	bool inlined; /* shares its address with the frame before (an inline chain) */
};

struct th_prof_rec {
	long count, bytes;
	int nframes;
	struct th_frame f[TH_PROF_MAX_FRAMES];
};

struct th_prof {
	int n;
	struct th_prof_rec *r;
	unsigned long long sampled, delivered, dropped, corrupt, unwound, truncated;
	char mode[16];
};

/* An expected frame: func at src:@marker, or func anywhere (marker NULL). */
struct th_want {
	const char *func;
	const char *src;
	const char *marker;
};

/* The part of path after its last slash. */
const char *th_basename(const char *p);
/* The line starting at l, without its newline, into line (cut to fit); its length. */
size_t th_line_copy(const char *l, char *line, size_t cap);
/* Parse Go's legacy heap text as text.c writes it (its accounting and unwind lines asserted):
 * every record with every frame. Free with th_prof_free. */
void th_prof_parse(const char *text, struct th_prof *p);
void th_prof_free(struct th_prof *p);
/* Run cmd in dir under `llgo-heap run --unwind mode -r 1 -f text`, parse its profile, and
 * expect its accounting whole (nothing dropped or corrupt); env: assignments for the shell
 * to put before llgo-heap run ("" for none). */
void th_prof_run_env(struct th_prof *p, const char *dir, const char *env, const char *mode,
		     const char *cmd);
void th_prof_run(struct th_prof *p, const char *dir, const char *mode, const char *cmd);
/* Line of the "@name" marker in a program's source (tests/progs/src). */
int th_marker(const char *src, const char *name);
bool th_frame_is(const struct th_frame *f, const struct th_want *w);
/* The roots of the main thread's stack and of another thread's. */
extern const struct th_want th_main_root[3];
extern const struct th_want th_thread_root[2];
/* A record's stack, a frame a line, into out. */
void th_prof_describe(const struct th_prof_rec *r, char *out, size_t cap);
/* The allocations whose stack is exactly head (from frame 0 on) followed by root: count them.
 * With root NULL, only the head must match, from frame 0, and the stack must end at a thread
 * start (either root). */
long th_prof_count(const struct th_prof *p, const struct th_want *head, int nhead,
		   const struct th_want *root, int nroot);
/* The allocations whose stack holds want[0..n) as consecutive frames followed by root (to
 * the end). */
long th_prof_count_tail(const struct th_prof *p, const struct th_want *want, int n,
			const struct th_want *root, int nroot);
/* Every record's count and stack on stderr. */
void th_prof_dump(const struct th_prof *p);
/* No stack ends in [truncated], and every stack reaches a thread's start. */
void th_prof_expect_whole(const struct th_prof *p);
/* cr_expect_eq(got, want, ...) that also sets the bool bad when they differ (the caller then
 * dumps what it saw). */
#define TH_EXPECT_EQ_OR(bad, got, want, ...)                                                \
	do {                                                                               \
		long g_ = (got);                                                           \
		(bad) |= g_ != (long)(want);                                               \
		cr_expect_eq(g_, (long)(want), __VA_ARGS__);                               \
	} while (0)

/* ---- a fake llgo-heapd for the shim's tests ------------------------------------------------- */

/* A SOCK_SEQPACKET listener in a private temp dir, run in a thread of the test, that ACKs
 * HELLO (or, with TH_FAKE_ACK_NEVER, never answers; with TH_FAKE_ACK_REFUSE, refuses), maps
 * the rings of ADD_RING (and of the process memfd) with agent/ring.c, drains them (all along
 * with drain, else at WAKE, BYE and EOF) and answers BYE; every record it read in recs. */
#define TH_FAKE_MAX_CONNS 32
#define TH_FAKE_MAX_RINGS 1024

enum th_fake_ack { TH_FAKE_ACK_OK, TH_FAKE_ACK_NEVER, TH_FAKE_ACK_REFUSE };

struct ring_reader; /* agent/internal.h's */

struct th_fake_conn {
	int fd;
	pid_t pid;
	uint64_t flags;
	int64_t rate_word;
	uint32_t ring_data_size;
	char comm[LLGO_COMM_LEN];
	bool hello, bye, closed;
	struct llgo_ctl *ctl;
	int memfd;             /* the process memfd (LLGO_HELLO_MEMFD), else -1 */
	uint64_t memfd_ino;
	int joined;            /* a reconnect: the earlier connection whose rings these are */
	uint32_t rings_known;  /* ring ids below this were mapped from memfd */
	struct th_acct acct;   /* its rings' accounting, once the fake stopped */
	uint32_t nrings;
};

struct th_fake_rec {
	int conn;
	uint32_t tid;
	uint64_t size, rate;
	uint32_t nframes;
	uint64_t frames[8];
};

struct th_fake {
	char dir[64];
	char path[108];
	char sock_env[128]; /* LLGO_HEAP_SOCKET=path */
	int lfd;
	pthread_t th;
	_Atomic bool stop;
	enum th_fake_ack ack;
	bool drain;       /* drain rings while running (else only at WAKE, BYE and EOF) */
	_Atomic bool ignore_wake; /* and not at WAKE either (set while the fake runs) */
	int nconns;
	struct th_fake_conn conns[TH_FAKE_MAX_CONNS];
	int nrings;
	struct ring_reader *rings; /* TH_FAKE_MAX_RINGS of them */
	int ring_conn[TH_FAKE_MAX_RINGS];
	int map_errors, bad_packets, wakes, live_tables;
	struct th_fake_rec *recs;
	size_t nrecs, cap;
	int cur_conn;
};

struct th_fake *th_fake_start(enum th_fake_ack ack, bool drain);
/* Stop the listener (after the programs exited), drain and account everything. */
void th_fake_stop(struct th_fake *f);
void th_fake_free(struct th_fake *f);
/* The connection of pid that said HELLO, or -1. */
int th_fake_conn_of(struct th_fake *f, pid_t pid);

/* A program run to its end, stdout and stderr together. */
struct th_exec {
	int status; /* exit code, or 128 + signal */
	char out[65536];
	double seconds;
};

/* Run argv with LD_PRELOAD of the plain shim (or nothing preloaded when !shim) and extra
 * NAME=VALUE strings (NULL-terminated), capturing stdout and stderr together. */
void th_exec_with(struct th_exec *r, bool shim, const char *const *env_extra,
		  const char *const *argv);
/* th_exec_with under the shim. */
void th_exec(struct th_exec *r, const char *const *env_extra, const char *const *argv);
/* Run argv under the shim attached to f, with the settings rate and more (each NULL or a
 * NAME=VALUE string), then stop f; the program must exit 0. */
void th_fake_run(struct th_fake *f, struct th_exec *r, const char *rate, const char *more,
		 const char *const *argv);
/* th_fake_run at rate 1 on a new fake daemon that drains as it goes: the fake, stopped. */
struct th_fake *th_fake_rate1(struct th_exec *r, const char *const *argv);

/* The function symbols of a program (libelf), placed where a run of it had them. */
struct th_syms {
	size_t n;
	struct {
		char name[64];
		uint64_t lo, hi;
	} s[4096];
	uint64_t slide; /* runtime address - link-time address */
};

void th_syms_load(struct th_syms *y, const char *path);
uint64_t th_syms_addr(const struct th_syms *y, const char *name);
/* The function a return address (runtime) belongs to, or "?". */
const char *th_syms_name(const struct th_syms *y, uint64_t pc);
/* Place y where the run that printed out ("main 0x...") had it. */
void th_syms_slide(struct th_syms *y, const char *out);
/* The symbols of the program at path, placed where a run that printed out had them. */
void th_syms_of_run(struct th_syms *y, const char *path, const char *out);
/* Records of connection c whose frame 0 is in func with the given size (0: any). */
long th_fake_count_site(struct th_fake *f, const struct th_syms *y, int c, const char *func,
			uint64_t size);
/* Connection c's accounting adds up, nothing corrupt. */
void th_fake_expect_accounting(struct th_fake *f, int c);

/* ---- periodic snapshots in a dump folder: dump_grow and the files ----------------------------- */

#define TH_GROW TH_PROGS "/dump_grow"

/* tests/progs/dump_grow, which keeps growing one site (dump_grow_site). */
struct th_grow {
	pid_t pid;
	FILE *out;
};
/* TH_GROW (or path, run with argv0) as uid at rate 65536, keeping mb MiB at dump_grow_site
 * (0: until killed); cgroup: a cgroup.procs file the child enters first (NULL: none). Waits
 * for "grown" when mb > 0, and for the daemon to list it. */
void th_grow_start(struct th_grow *p, const struct heapd *d, uid_t uid, const char *path,
		   const char *argv0, int mb, const char *cgroup);
/* SIGKILL it first when kill_it; its wait status. */
int th_grow_end(struct th_grow *p, bool kill_it);
/* Files in dumps/uid of pid (0: any) whose name has `kind` (".heap." or ".oom."); their names
 * (up to max) in names. Returns how many. */
int th_dump_files(const char *dumps, uid_t uid, pid_t pid, const char *kind,
		  char (*names)[128], int max);
/* Wait (up to ms) until dumps/uid holds at least want such files; how many it holds. */
int th_dump_wait(const char *dumps, uid_t uid, pid_t pid, const char *kind, int want,
		 unsigned ms);
/* The function of the first row of `go tool pprof -top` (in-use bytes) of file. */
void th_pprof_top(const char *file, char *fn, size_t cap);
/* A daemon's folder (heapd_init: not started yet), and its dumps folder's name in dumps. */
void th_dump_init(struct heapd *d, char dumps[256]);

/* ---- BPF: programs attached to the shim's USDT probes --------------------------------------- */

/* Why BPF cannot work on this machine, or NULL when it should: root (CAP_BPF and
 * CAP_PERFMON), the kernel's BTF, Linux 5.8+ (ring buffer, uprobe semaphores). */
const char *th_bpf_unavailable(void);
/* Skips the running test (named file, e.g. "test_verify") when BPF cannot work. */
#define TH_NEED_BPF(file)                                                                  \
	do {                                                                               \
		const char *why_ = th_bpf_unavailable();                                   \
		if (why_) {                                                                \
			fprintf(stderr, file ": skipped: %s\n", why_);                     \
			cr_skip_test("BPF unavailable: %s", why_);                         \
		}                                                                          \
	} while (0)

/* ---- /proc --------------------------------------------------------------------------------- */

/* A "Key:  N kB" field of /proc/PID/status (pid 0: self), or -1. */
long th_status_kb(pid_t pid, const char *key);
/* utime + stime of pid in clock ticks, or -1. */
long th_cpu_ticks(pid_t pid);
/* The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), 0 when pid is gone. */
char th_proc_state(pid_t pid);

#endif
