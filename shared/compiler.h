/* SPDX-License-Identifier: MIT */
/*
 * compiler.h: attribute and branch-hint macros used by the shim, the agent and the tests.
 * Only macros live here; nothing in this file emits code or data.
 */
#ifndef LLGO_SHARED_COMPILER_H
#define LLGO_SHARED_COMPILER_H

#define llgo_likely(x) __builtin_expect(!!(x), 1)
#define llgo_unlikely(x) __builtin_expect(!!(x), 0)
#define llgo_noinline __attribute__((noinline))
#define llgo_cold __attribute__((cold))
#define llgo_hidden __attribute__((visibility("hidden")))
#define llgo_export __attribute__((visibility("default")))
#define llgo_unused __attribute__((unused))
#define llgo_aligned(n) __attribute__((aligned(n)))
#define llgo_tls_ie __attribute__((tls_model("initial-exec")))

#define LLGO_CACHELINE 64
#define LLGO_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
