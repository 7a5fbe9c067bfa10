/* SPDX-License-Identifier: MIT */
/*
 * session.h: llgo-heapd's attached processes (session.c) and their registry
 * (session_registry.c), the processes taken back after a restart (adopt.c) and their in-use
 * tables (inuse.c). The drain is drain.h's, the socket server server.h's, snapshots
 * snapshot.h's. The CLI never includes this file; the cross-file helpers both programs use
 * are in internal.h.
 *
 * Locks, in the order they may be taken (never the other way):
 *   session->snapshot_lock  one snapshot's cut of the table at a time (snapshot.c); the final
 *                         drain takes it too, so a snapshot's in-use scan never outlives the
 *                         live table's mapping
 *   session->drain_lock   single consumer of the session's rings; adopted ring readers,
 *                         rates seen, retired accounting; held for a drain, a snapshot's
 *                         cut (not its walk of the table), and the final drain at exit
 *   session->lock         small fields: pending rings, ring ids, control page, cached counts
 *   registry->lock        the session list and its exited count
 * The bucket table has its own insert lock (never held while calling out); lookups and
 * snapshot walks take none.
 */
#ifndef LLGO_AGENT_SESSION_H
#define LLGO_AGENT_SESSION_H

#include <time.h>

#include "../internal.h"
#include "../../common/log.h" /* every daemon file logs */

/* ---- session.c: one attached process; session_registry.c: the registry of them --------- */

#define SESSION_DEFAULT_KEEP_EXITED 256u
#define SESSION_DEFAULT_KEEP_EXITED_PER_UID 64u
#define SESSION_DEFAULT_KEEP_EXITED_AGE_S 3600u

struct session_counts {
	uint64_t sampled, delivered, dropped, corrupt;
	/* Parts of dropped: taken by an earlier reader (a daemon that died, a session that
	 * ended), samples that found no ring, samples taken while the shim had no daemon. */
	uint64_t prior, no_ring, detached;
	uint64_t reconnects;
};

struct session_registry;
struct inuse_rekey;
struct verify_target;

struct session {
	/* Immutable once the session is registered. */
	pid_t pid; /* SO_PEERCRED, never the message */
	uid_t uid;
	gid_t gid;
	char comm[LLGO_COMM_LEN];
	uint64_t attach_ns;  /* CLOCK_REALTIME at HELLO */
	uint64_t proc_start; /* /proc/PID/stat starttime (ticks since boot); 0 unknown */
	uint64_t seq;        /* registry order, 1.. */
	/* The accept order of the connection whose HELLO made it (0: taken back by adopt.c):
	 * of two sessions of one process (it exec'd), the later connection is the newer image,
	 * whichever HELLO a worker finished first (session_newer). */
	uint64_t conn_serial;
	uint32_t ring_data_size;
	struct bucket_table *buckets;
	struct procmaps *maps; /* NULL when /proc/PID/maps could not be read */
	/* The registry that made it (session_new), and what it gave it: the budgets it charges
	 * (budget.c; NULL: none) and the memfd claims (claims.c). All NULL once the registry
	 * is freed. */
	struct session_registry *reg;
	struct budget *budget;
	struct claims *claims;

	_Atomic int refs;
	_Atomic int state; /* enum llgo_proc_state */
	_Atomic bool detached; /* ended by llgo-heap detach (jobs.c): listed as detached */

	pthread_mutex_t lock;
	struct llgo_ctl *ctl;           /* shared, hostile; NULL once exited */
	/* The process memfd (LLGO_HELLO_MEMFD; -1 for a control page alone): rings are mapped
	 * from it by id up to ctl.ring_count. page_size is the shim's, checked. */
	int memfd;
	bool has_memfd; /* set once at attach: a memfd session (memfd is -1 again at exit) */
	/* The process memfd's identity (or the control page's, without has_memfd), held in
	 * the registry's claims from attach until unmapped (memfd_claimed) */
	uint64_t memfd_dev, memfd_ino;
	bool memfd_claimed;
	uint32_t page_size;
	uint32_t rings_known;           /* ring ids below this are mapped (memfd sessions) */
	uint32_t baseline_below;        /* rings below this id existed before we did: baseline */
	uint64_t lost_detached;         /* highest value seen in ctl */
	uint64_t reconnects;
	struct ring_reader *pending;    /* mapped, not yet adopted by a drain */
	size_t npending, cap_pending;
	uint8_t *ring_ids;              /* ids seen, LLGO_MAX_RINGS bits; freed at exit */
	uint32_t nrings;                /* rings accepted, adopted or pending */
	int64_t last_rate_word;         /* last value seen in (or written to) ctl */
	uint64_t lost_no_ring;          /* highest value seen in ctl */
	uint64_t rate_changes;
	struct session_counts cached;   /* as of the last drain */

	/* snapshot.c: one snapshot of the session reads its table at a time (a cut, bucket.c);
	 * taken before drain_lock, and by the final drain before it unmaps the live table */
	pthread_mutex_t snapshot_lock;

	pthread_mutex_t drain_lock;
	struct ring_reader *rings;
	size_t nrings_adopted, cap_rings;
	struct session_counts retired;  /* rings already unmapped */
	uint64_t first_rate, last_rate; /* rates seen in records (0: none yet) */
	bool mixed_rates;
	bool maps_stale;                /* a pc outside every mapping awaits a refresh */
	uint64_t last_refresh_ns;       /* CLOCK_MONOTONIC */
	uint64_t records;               /* records bucketed */
	uint64_t bucket_errors;         /* bucket_table_add failures (out of memory) */
	struct verify_target *verify;   /* verify.c: the eBPF cross-check attached, or NULL */
	/* ident.c: pins the process that connected (-1: none, e.g. tests); ident_lost is set
	 * once it changed identity (setuid exec, exit with the socket kept): then nothing more is
	 * read of it and only root may read the session. */
	int pidfd;
	_Atomic bool ident_lost;
	/* budget.c: what this session holds of its uid's budgets (given back at retire for the
	 * live-session slot and the rings, at free for bucket memory). buckets_over: the uid is
	 * over its bucket memory, records are counted in budget_dropped instead of bucketed. */
	bool holds_session;
	uint32_t rings_held;
	uint64_t ring_bytes_held, bucket_bytes_held;
	_Atomic bool buckets_over;
	_Atomic uint64_t budget_dropped;
	uint64_t exit_ns; /* CLOCK_MONOTONIC when it became EXITED */
	/* verify.c: samples compared with the kernel's capture since the process attached, and
	 * those whose stacks agreed (LIST, profile comments); atomic, no lock */
	_Atomic uint64_t verify_samples, verify_agree;

	/* inuse.c: the live-object table. live and live_state change under lock; the table is
	 * read under drain_lock (the scan needs the readers' sequence numbers). */
	struct llgo_live_header *live; /* shared, hostile, read-only; NULL when none */
	int live_fd;                   /* its memfd (holes are found with SEEK_DATA); -1 none */
	uint64_t live_dev, live_ino;   /* its identity, held in the registry's claims while
					  live_fd is open */
	int live_state;                /* enum session_live */
	struct inuse_counts live_frozen; /* as of the freeze at exit */
	/* inuse.c: references of records bucketed under another stack than the shim walked
	 * (unwound from a stack copy, or completed when the stack-derived map below could not
	 * say it): under drain_lock */
	struct inuse_rekey *rekey;
	/* inuse.c: shim key -> bucket key, for records whose bucket stack the daemon derived
	 * from the shim's own walk (completed with a known tail, or marked truncated): one
	 * entry per stack, not per record. `stacks_base` is read by a snapshot's scan while
	 * the drain reads it too; it changes only at a cut, under drain_lock, with no scan
	 * running (snapshot_lock); `stacks` gets the drain's new entries (drain_lock). */
	struct inuse_rekey *stacks, *stacks_base;
	uint64_t stacks_gen; /* changes when stack notes are dropped (inuse_release) */

	/* http_targets.c: LLGO_HEAP_SERVICE from /proc/PID/environ (NULL: none, the command
	 * name is used) and /proc/PID/exe (NULL: unreadable), read once with the identity
	 * checked; set under lock before names_known (release), never changed after. */
	char *service_name, *exe;
	_Atomic bool names_known;

	/* peak.c: the sampled in-use high-water mark. peak_since, peak_base and peak_bound
	 * change under drain_lock; the capture kept (peak) and peak_scans under snapshot_lock;
	 * the rest are atomics (relaxed) the drain reads to decide whether to ask for a scan. */
	struct peak_capture *peak;
	uint64_t peak_since; /* records drained since the last scan's cut, weighed (peak.c) */
	uint64_t peak_base;  /* in-use total the last scan found */
	uint64_t peak_bound; /* the highest base + since seen: the true peak is at most this */
	uint64_t peak_scans; /* table scans made for the peak (each kept or not) */
	uint64_t peak_gap_ns; /* wait after a scan that found no new peak (doubles, capped) */
	uint64_t peak_last_ns; /* CLOCK_MONOTONIC at the end of the last scan */
	_Atomic uint64_t peak_best;    /* peak->total_bytes (0: none yet) */
	_Atomic uint64_t peak_mem;     /* bytes peak holds (session_charge_buckets) */
	_Atomic uint64_t peak_next_ns; /* no background scan before (CLOCK_MONOTONIC) */
	_Atomic bool peak_want;        /* the drain asks the peak thread for a scan */

	struct unwind *unwind;          /* ALLOC_RAW records' unwinder, made on first use */
	/* ALLOC_RAW stacks unwound; not to the thread's start. Written by the drain under
	 * drain_lock, read anywhere (relaxed): LIST reads them in the event loop. */
	_Atomic uint64_t unwound, truncated;
	uint32_t unwind_mode;           /* enum llgo_unwind_mode, from HELLO (set once, see drain.c) */
	uint32_t fp_seq;                /* last sequence count written to ctl (under lock) */

	struct session *next; /* registry list, newest first */
};

enum session_live {
	SESSION_LIVE_NONE = 0,   /* no table received */
	SESSION_LIVE_MAPPED = 1, /* mapped; scanned at each snapshot */
	SESSION_LIVE_FROZEN = 2, /* exited: the buckets' free counters hold the final scan */
};

struct session_registry *session_registry_new(unsigned keep_exited, uint64_t max_buckets,
					      uint64_t max_bytes);
struct budget;
/* Budgets (budget.c) sessions charge their rings, slots and buckets to (NULL: none); exited
 * sessions kept per uid (0: no limit of its own) and for at most max_age_s (0: forever). */
void session_registry_set_limits(struct session_registry *reg, struct budget *b,
				 unsigned keep_exited_per_uid, unsigned max_age_s);
/* A reload: exited sessions kept (for all, per uid, for at most max_age_s) and the bucket
 * limits of processes that attach from now on (0: the bucket table's defaults). */
void session_registry_set_keep(struct session_registry *reg, unsigned keep_exited,
			       unsigned keep_exited_per_uid, unsigned max_age_s,
			       uint64_t max_buckets, uint64_t max_bytes);
/* Evict exited sessions past their age; returns how many. */
size_t session_registry_expire(struct session_registry *reg);
/* Evicted so far (count or age), for the log and tests. */
uint64_t session_registry_evicted(struct session_registry *reg);
/* An unwinder for s's process (unwind_new) whose file copies are charged to s's uid. */
struct unwind *session_new_unwind(struct session *s, bool auto_mode);
/* Take a live-session slot of s's uid (-EDQUOT when over budget). */
int session_take_slot(struct session *s);
/* After a drain: charge bucket memory grown since the last call; sets buckets_over. */
void session_charge_buckets(struct session *s);
/* Drops the registry's references; sessions still referenced elsewhere live on. */
void session_registry_free(struct session_registry *reg);
/* The budgets the registry's sessions charge (those given to session_registry_set_limits;
 * NULL: none), for http_metrics.c. */
struct budget *session_registry_budget(struct session_registry *reg);
/* After s became EXITED (session_retire_locked returned true; drain.c's final drain): count
 * it, evict what the limits then say, wake session_wait_exited. */
void session_registry_exited(struct session_registry *reg, struct session *s);

/* A new, unregistered session (one reference, the caller's), made by the registry
 * (session_registry.c): its bucket caps, budgets and claims are the registry's. */
struct session *session_new(struct session_registry *reg, pid_t pid, uid_t uid, gid_t gid,
			    const char *comm, uint32_t ring_data_size);
/* Map the control page memfd (read/write) after checking its size, magic and version. */
int session_attach_ctl(struct session *s, int fd);
/* Map the control page from a process memfd and keep the memfd for its rings. reattached:
 * rings already in it were read by someone else before (their records so far are counted as
 * taken by an earlier reader). */
int session_attach_memfd(struct session *s, int fd, bool reattached);
/* Whether fd is the memfd s already holds (same file). */
bool session_same_memfd(const struct session *s, int fd);
/* Map the rings the shim announced in ctl.ring_count and we do not have yet (memfd
 * sessions); returns how many were added. */
size_t session_sync_rings(struct session *s);
/* Of two sessions, whether a is the newer (two of one process: the later connection). */
bool session_newer(const struct session *a, const struct session *b);
/* The live session of the process pid started at start_ticks with this memfd, if any. */
struct session *session_find_live(struct session_registry *reg, pid_t pid, uint64_t start,
				  int memfd);
/* The live session of the process pid started at start (any memfd), if any. */
struct session *session_find_process(struct session_registry *reg, pid_t pid, uint64_t start);
/* Whether the daemon may still read the process as its owner would (ident_verify against
 * the pidfd, or the start time when there is none); once false, always false. */
bool session_may_read(struct session *s);
/* After a read: a process that exited meanwhile, but was itself until then, is fine. */
bool session_may_have_read(struct session *s);
/* Read the process's mappings (procmaps_new), checking its identity before and after. */
int session_attach_maps(struct session *s);
/* A fork child gone before its maps were read: its parent's (same uid only), which were its
 * own at fork. */
int session_attach_parent_maps(struct session *s, pid_t ppid);
/* Make the session visible to lookups; the registry takes its own reference. */
void session_register(struct session *s);
struct session *session_get(struct session *s);
void session_put(struct session *s);

/* The session `snapshot PID` means: the live one, else the newest (session_newer). */
struct session *session_lookup(struct session_registry *reg, pid_t pid);
/* Referenced sessions, oldest first; live_only, or one per pid (the lookup's choice). */
size_t session_list(struct session_registry *reg, bool live_only, struct session ***out);
void session_list_release(struct session **v, size_t n);

/* Map a ring memfd and queue it for the next drain. */
int session_add_ring(struct session *s, uint32_t ring_id, int fd, uint32_t data_size);
/* Move queued rings to the adopted array; caller holds drain_lock. */
void session_adopt_rings_locked(struct session *s);
/* Per-process accounting from the adopted rings (caller holds drain_lock); also refreshes
 * the cached copy that session_counts_cached returns without waiting for a drain. */
void session_account_locked(struct session *s, struct session_counts *out);
void session_counts_cached(struct session *s, struct session_counts *out);
/* auto mode: write the unwinder's frame-pointer ranges and roots to the control page when
 * they changed (caller holds drain_lock; see shared/ring.h for the sequence count). */
void session_send_fp_tables(struct session *s);
/* Unmap rings and control page after the final drain; mark EXITED; caller holds drain_lock.
 * False when s was not live (nothing done). */
bool session_retire_locked(struct session *s);

static inline bool session_is_live(const struct session *s)
{
	return atomic_load_explicit(&s->state, memory_order_acquire) == LLGO_PROC_LIVE;
}
/* Whether requester may read s: root, or its owner while the process kept its identity
 * (ident.c: once it exec'd a setuid program, what was read of it is root's only). */
bool session_allowed(const struct session *s, uid_t requester);
/* Whether the process that attached still runs (same pid and start time, not a zombie). */
bool session_process_alive(const struct session *s);
/* Wait until the session is EXITED (session_registry.c); returns false on timeout. */
bool session_wait_exited(struct session *s, unsigned timeout_ms);
/* The public rate in force (from the control page while live). */
uint64_t session_rate(struct session *s);
/* Write a new rate to the control page; -ESRCH once exited. */
int session_set_rate(struct session *s, uint64_t rate, uint64_t *old_rate, uint64_t *new_rate);
void session_list_entry(struct session *s, struct llgo_list_entry *e);

static inline uint64_t session_now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- claims.c: one session per memfd --------------------------------------------------- */

/* A memfd (the process memfd, a control page, a live-object table: by device and inode)
 * backs one session only, from its attach until the session unmaps it. Take the file for s:
 * 0, or -EBUSY when a session of another process holds it (one of the same process, pid and
 * start time, hands it to s: that HELLO replaces it); -ENOMEM. Give it back if s holds it.
 * A NULL table (the registry is gone) holds nothing and refuses nothing. */
struct claims;
struct claims *claims_new(void);
void claims_free(struct claims *c);
int claims_take(struct claims *c, uint64_t dev, uint64_t ino, const struct session *s);
void claims_give(struct claims *c, uint64_t dev, uint64_t ino, const struct session *s);

/* ---- adopt.c: processes to take back after a restart ---------------------------------- */

struct adopt_proc {
	pid_t pid;
	uid_t uid; /* the uid and gid a daemon verified at HELLO, checked again (adopt.c) */
	gid_t gid;
	uint64_t start; /* starttime, read while the pidfd pinned the process */
	int pidfd;
	int memfd; /* the process memfd (proved: vouched for this process, this socket's) */
	int livefd; /* its live-object table's memfd, or -1 (fn does not own it) */
};
/* Returns 0 when it took both descriptors, else nonzero (the scan closes them). */
typedef int (*adopt_fn)(void *arg, const struct adopt_proc *p);
struct vouch_key;
/* Every running process whose shim was attached to socket_path, whose memfd a daemon of the
 * socket vouched for (key), that is still what was vouched for, and can be read by us (root:
 * all; else our own uid); returns how many fn took. None without a key (key->ok false). */
size_t adopt_scan(const char *socket_path, const struct vouch_key *key, adopt_fn fn, void *arg);

/* ---- inuse.c: in-use values from the live-object table -------------------------------- */

/* Map a live-table memfd (LLGO_MSG_ADD_LIVE): size, seal, magic; one per session, and one
 * session per table (-EBUSY when another process's session holds it). */
int inuse_map(struct session *s, int fd);
/* Set p's free counters from the table (caller holds drain_lock, p collected from s's
 * buckets, untrimmed) and state the accounting in p->meta. */
int inuse_apply_locked(struct session *s, struct profile *p);
/* The same in three steps, so that the scan runs beside the drain (snapshot.c): under
 * drain_lock, note the cut (the rings' next sequence numbers, the notes of re-keyed records
 * so far); with no lock, apply the table to p collected as of that same cut; under drain_lock
 * again, give the notes back. The caller holds s->snapshot_lock throughout, which keeps the
 * table mapped (the final drain takes it before unmapping). */
struct inuse_cut {
	int state; /* enum session_live */
	struct inuse_counts frozen;
	const struct llgo_live_header *h;
	int fd;
	uint64_t *seqs; /* each ring's next sequence number at the cut */
	size_t nrings;
	struct inuse_rekey *rekey;
	const struct inuse_rekey *stacks; /* the session's stacks_base, read-only during the scan */
	uint64_t budget; /* slots the scan may read (the samples drained at the cut) */
};
int inuse_cut_locked(struct session *s, struct inuse_cut *c);
int inuse_apply_cut(struct session *s, struct inuse_cut *c, struct profile *p);
void inuse_cut_end_locked(struct session *s, struct inuse_cut *c);
/* The process is gone (caller holds drain_lock, after the final drain, before retiring):
 * store the final in-use values in the buckets' free counters and unmap the table. */
void inuse_freeze_locked(struct session *s);
/* A record (ring_id, seq) the shim keyed by shim_key went to the bucket with bucket_key
 * (caller holds drain_lock); remembered when they differ: by stack when `derived` (the
 * bucket's stack is a function of the shim's walk) and that stack maps to one bucket key,
 * else by record. Returns true when nothing was kept for this record alone (the keys are
 * equal, or the stack's note holds), so that the same stack needs no note again while
 * s->stacks_gen stays. */
bool inuse_note_record_locked(struct session *s, uint32_t ring_id, uint64_t seq,
			      uint64_t shim_key, uint64_t bucket_key, bool derived);
/* Unmap the table (session teardown). */
void inuse_release(struct session *s);

/* ---- peak.c: the sampled in-use high-water mark --------------------------------------- */

/* The in-use values of every bucket with live objects at one scan (peak.c). */
struct peak_capture {
	uint64_t total_bytes, total_objects; /* scaled, as inuse_space/inuse_objects sum */
	uint64_t time_ns;  /* CLOCK_REALTIME of the scan's cut */
	uint64_t mono_ns;  /* CLOCK_MONOTONIC of the same */
	bool at_exit;      /* the in-use values frozen at the process's exit */
	uint64_t inuse_state; /* enum profile_inuse of the scan */
	struct inuse_counts counts;
	size_t n;
	struct psample v[]; /* alloc_* = in use at the scan, free_* = 0 */
};

/* A record of size bytes at rate was drained into s (caller holds drain_lock): the most it
 * can add to the scaled in-use total. */
static inline void peak_note(struct session *s, uint64_t size, uint64_t rate)
{
	/* size / (1 - exp(-size/rate)) <= size + rate: Go's scaled bytes of one sample */
	uint64_t w = rate > 1 ? size + rate : size;
	uint64_t v = s->peak_since + w;
	s->peak_since = v < s->peak_since || w < size ? UINT64_MAX : v;
}
/* After a drain pass that counted `records` records of s (caller holds drain_lock): whether
 * a scan is due now (it sets s->peak_want; the peak thread makes it). */
bool peak_pass_locked(struct session *s, size_t records);
/* Every cut of s's table with its in-use values is a scan for the peak (snapshot.c's
 * snapshot_cut): peak_cut_locked at the cut (drain_lock held), then, once p holds the cut's
 * in-use values (NULL: the scan failed), peak_rebase_locked (drain_lock held again; returns
 * whether p's total is the highest yet) and, when it is, peak_keep (drain_lock not held).
 * The caller holds snapshot_lock throughout. */
struct peak_cut {
	uint64_t since;        /* s->peak_since at the cut */
	uint64_t real_ns, mono_ns, cpu_ns; /* cpu: the thread's CPU time */
	uint64_t bytes, objects; /* p's scaled in-use totals (peak_rebase_locked) */
};
void peak_cut_locked(struct session *s, struct peak_cut *c);
bool peak_rebase_locked(struct session *s, struct peak_cut *c, const struct profile *p);
void peak_keep(struct session *s, const struct peak_cut *c, const struct profile *p);
/* The process exited (caller holds snapshot_lock and drain_lock, after inuse_freeze_locked):
 * its in-use values at exit are a candidate too (the caller charges a capture kept then:
 * session_charge_buckets). */
void peak_exit_locked(struct session *s);
/* Replace p's samples by the kept capture's and describe it in p->meta.peak (caller holds
 * snapshot_lock; p was just cut, so the kept capture is at least as high as p). */
int peak_copy(struct session *s, struct profile *p);
/* Memory held by s's capture (charged to its uid's bucket memory). */
uint64_t peak_bytes(struct session *s);
void peak_release(struct session *s);



#endif
