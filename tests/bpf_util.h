/* SPDX-License-Identifier: MIT */
/*
 * bpf_util.h: whether this machine can run the tests that load BPF programs and attach them
 * to the shim's USDT probes (test_verify.c: llgo-heap verify; test_otel.c: a collector of
 * OpenTelemetry's otel_memory probes), and the skip with the reason printed where it cannot.
 * Header-only.
 */
#ifndef LLGO_TESTS_BPF_UTIL_H
#define LLGO_TESTS_BPF_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <unistd.h>

/* Why BPF cannot work on this machine, or NULL when it should: root (CAP_BPF and
 * CAP_PERFMON), the kernel's BTF, Linux 5.8+ (ring buffer, uprobe semaphores). */
static inline const char *bpf_util_unavailable(void)
{
	static char why[256];
	if (geteuid() != 0)
		return "not root (needs CAP_BPF and CAP_PERFMON)";
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		return "the kernel has no BTF (/sys/kernel/btf/vmlinux)";
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
	    (major < 5 || (major == 5 && minor < 8))) {
		snprintf(why, sizeof(why), "kernel %s is older than 5.8", u.release);
		return why;
	}
	return NULL;
}

/* Skip the running test (named file, e.g. "test_verify") when BPF cannot work. */
#define BPF_UTIL_NEED(file)                                                                \
	do {                                                                               \
		const char *why_ = bpf_util_unavailable();                                 \
		if (why_) {                                                                \
			fprintf(stderr, file ": skipped: %s\n", why_);                     \
			cr_skip_test("BPF unavailable: %s", why_);                         \
		}                                                                          \
	} while (0)

#endif
