/* SPDX-License-Identifier: MIT */
/*
 * verify.h: llgo-heapd's eBPF cross-check of recorded stacks (verify.c), as server.c and
 * drain.c see it. A `struct verifier` per daemon owns the BPF object (verify.bpf.c, loaded
 * on first use) and the thread that reads its ring buffer; a `struct verify_target` per
 * verified process holds the link to its probe, the captures and records waiting for their
 * other half, and the counts.
 *
 * Locks, in order: session->drain_lock, then verifier->lock, then target->lock (drain.c calls
 * verify_match_record under drain_lock; the ring buffer thread takes verifier->lock then the
 * target's). session->verify changes only under drain_lock.
 */
#ifndef LLGO_AGENT_VERIFY_H
#define LLGO_AGENT_VERIFY_H

#include "../ingest/drain.h"

struct verifier;
struct verify_target;

/* settle(arg, s): wait until the socket server handled every packet s's shim sent before
 * now (server.c's server_settle), before a one-off verify drains s. */
struct verifier *verifier_new(void (*settle)(void *arg, struct session *s), void *arg);
/* The daemon stops: one-off verifies in progress end their collection now. */
void verifier_cancel(struct verifier *v);
/* Detach and free every target, unload the program. NULL is fine. */
void verifier_free(struct verifier *v);
/* Load the BPF program and start its reader (idempotent). 0, or -errno with a one-line
 * cause (no privilege, no BTF, kernel too old, unprivileged BPF disabled...) in err. */
int verifier_load(struct verifier *v, char *err, size_t errlen);

/* llgo-heapd --verify-every N: attach to s for good, checking samples whose seq is a
 * multiple of every. Failures are logged (the process is profiled as usual). */
void verify_session_start(struct verifier *v, struct session *s, uint32_t every);
/* Detach from s (its exit). No-op when s was not verified. */
void verify_session_stop(struct verifier *v, struct session *s);

/* drain.c: a valid ALLOC or ALLOC_RAW record of s's ring ring_id, with its stack
 * frames[0..n): as recorded (ALLOC), or as the drain unwound its copy (ALLOC_RAW: truncated
 * when that unwind stopped short of the stack's start). Caller holds s->drain_lock and has
 * checked s->verify != NULL. */
void verify_match_record(struct verify_target *t, uint32_t ring_id,
			const struct llgo_record *rec, const uint64_t *frames, uint32_t n,
			bool truncated);

/* `llgo-heap verify PID --seconds N`: attach (or reuse the --verify-every attachment with
 * every sample checked), collect for seconds, match and compare. Fills sum and appends the
 * human report to text. 0, or -errno with a one-line reason in err. */
int verify_run(struct verifier *v, struct session *s, uint32_t seconds,
	       struct llgo_verify_summary *sum, struct buf *text, char *err, size_t errlen);

/* A one-line cause for a libbpf/bpf() failure rc at step, in err (also oom.c's). */
void verify_explain(int rc, const char *step, char *err, size_t errlen);

#endif
