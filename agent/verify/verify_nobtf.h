/* SPDX-License-Identifier: MIT */
/*
 * verify_nobtf.h: what verify.bpf.c needs from "vmlinux.h" on a build machine without
 * /sys/kernel/btf/vmlinux (the Makefile copies this file in its place). The program reads
 * only struct pt_regs (through libbpf's usdt.bpf.h), whose x86-64 layout is the UAPI one, and
 * the BPF constants of <linux/bpf.h>. Not a replacement for BTF at run time: verify still
 * requires a kernel with BTF and says so.
 */
#ifndef LLGO_VERIFY_NOBTF_H
#define LLGO_VERIFY_NOBTF_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <asm/ptrace.h>

/* vmlinux.h defines these; the UAPI headers do not */
typedef _Bool bool;
enum { false = 0, true = 1 };

#endif
