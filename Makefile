# llgo-heap: one entry point for deps, build, tests, benchmarks and the demo.
#
#   make            build into build/ (bin/llgo-heapd, bin/llgo-heap, lib/libllgoheap.{so,a})
#   make deps       install the Debian packages the build and tests need (only missing ones)
#   make test       deps + build + every test (criterion unit, stress and end-to-end)
#   make demo       deps + build + profile a sample program, print top sites, write a pprof
#   make bench      allocation microbenchmarks (see docs/performance.md)
#   make bench-inuse  the in-use tracking rows alone (free path, live-heap memory, rate 1)
#   make bench-services  redis, nginx, memcached, PostgreSQL under load, with and without the shim
#   make bench-unwind  the DWARF unwinding rows of make bench alone
#   make bench-verify  the llgo-heap verify rows alone (fp and dwarf, with and without)
#   make bench-attach  what a process pays after llgo-heap attach and detach
#   make SAN=address,undefined test   sanitized daemon, CLI and unit tests in build-san-*/
#
# Sanitizer runtimes own malloc themselves, so under SAN= the LD_PRELOAD shim is still built
# without sanitizers (in the SAN build folder) and the end-to-end tests preload that plain shim
# into real programs while the daemon and CLI that serve them are sanitized.

# `make` alone builds everything (rules for test programs come before `all:` below).
.DEFAULT_GOAL := all

SAN ?=
comma := ,
V ?= 0
CC ?= cc
CXX ?= g++

ifeq ($(SAN),)
OUT := build
SANFLAGS :=
else
OUT := build-san-$(subst $(comma),-,$(SAN))
SANFLAGS := -fsanitize=$(SAN) -fno-sanitize-recover=all
endif

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)"
endif

WARN := -Wall -Wextra -Werror -Wundef -Wstrict-prototypes -Wno-unused-parameter
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O2 -fno-omit-frame-pointer $(WARN)
CFLAGS_AGENT := $(BASE_CFLAGS) $(SANFLAGS) -pthread
# The shim: no sanitizers ever, hidden by default, initial-exec TLS, no builtin malloc folding.
# SHIM_EXTRA_CFLAGS: include paths a cross build adds (the arm64 build's <sys/sdt.h>).
SHIM_EXTRA_CFLAGS ?=
CFLAGS_SHIM := $(SHIM_EXTRA_CFLAGS) $(BASE_CFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec \
	-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
	-fno-stack-protector -pthread
LIBS_AGENT := -lbpf -lelf -ldw -ldebuginfod -lz -lmicrohttpd -lcurl -lunwind-x86_64 -lunwind -lpthread -lm
# symbolizer/: llgo-heap-symbolizer, the sandboxed process that parses ELF/DWARF files for the
# daemon (one per profiled uid, agent/symhelper.c). libdw/libelf only, no agent objects.
SYMBOLIZER_SRCS := $(wildcard symbolizer/*.c)
SYMBOLIZER_OBJS := $(patsubst symbolizer/%.c,$(OUT)/obj/symbolizer/%.o,$(SYMBOLIZER_SRCS))
LIBS_SYMBOLIZER := -ldw -lelf -lz

# Criterion 2.4 cannot start under ThreadSanitizer (Snaipe/Criterion#274): with SAN=thread the
# same test files build against tests/nocriterion/, a stand-in with the subset of its API.
ifneq ($(findstring thread,$(SAN)),)
TEST_CRITERION := -Itests/nocriterion
else
TEST_CRITERION := -lcriterion
endif

SHIM_SRCS := $(wildcard shim/*.c)
SHIM_OBJS := $(patsubst shim/%.c,$(OUT)/obj/shim/%.o,$(SHIM_SRCS))
# The sampler without interposition: the hook API, for fully static executables (with
# shim/static/wrap.c) and the unit tests.
SHIM_LIB_OBJS := $(filter-out $(OUT)/obj/shim/override%.o,$(SHIM_OBJS))
# libllgoheap.a: the sampler and the malloc family and C++ operators of libllgoheap.so, so that
# a dynamic executable that links it is profiled as under LD_PRELOAD. Not the lifecycle
# wrappers (override_thread.c: pthread_create, prctl, syscall, _exit), whose definitions in a
# -static link would keep libc.a's own out of it with no next definition to call.
SHIM_ARCHIVE_OBJS := $(filter-out $(OUT)/obj/shim/override_thread.o,$(SHIM_OBJS))

AGENT_COMMON_SRCS := $(filter-out agent/daemon.c agent/%.bpf.c,$(wildcard agent/*.c))
AGENT_COMMON_OBJS := $(patsubst agent/%.c,$(OUT)/obj/agent/%.o,$(AGENT_COMMON_SRCS))

# client/: the protocol's client side (client.c, also linked into the tests) and the CLI.
# The CLI links that, the CLI's own files and exactly the agent objects they use (buf, msg,
# escape, gzip) and zlib, for the gzipped pprof files of `llgo-heap diff`: no libdw, libelf,
# libmicrohttpd, libbpf or libunwind (tests/test_e2e.c checks). The pprof reader and the diff
# (with what they use) are linked into the tests and the fuzz harnesses too.
CLIENT_OBJS := $(OUT)/obj/client/client.o
PPROFREAD_OBJS := $(patsubst %,$(OUT)/obj/client/%.o,pprofread diff human)
CLI_OBJS := $(patsubst client/%.c,$(OUT)/obj/client/%.o,$(filter-out client/client.c,\
	$(wildcard client/*.c))) $(CLIENT_OBJS) $(patsubst %,$(OUT)/obj/agent/%.o,buf msg escape gzip)
LIBS_CLI := -lz

# Objects and tests depend on the headers they include (-MMD -MP: $(OUT)/**/*.d, read at the
# end of this file). HEADERS is for the rules that compile several sources in one command
# (gcc then writes one dependency file for the last source only).
DEPFLAGS := -MMD -MP
HEADERS := $(wildcard shared/*.h agent/*.h client/*.h shim/*.h include/*.h tests/*.h symbolizer/*.h)

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRCS))
# tests/progs/nofp_* (and libnofp_*) are built the way most programs ship: -O2 without frame
# pointers (issue 9: DWARF unwinding); everything else keeps frame pointers.
PROG_C_SRCS := $(filter-out tests/progs/lib%,$(wildcard tests/progs/*.c))
PROG_SO_SRCS := $(wildcard tests/progs/lib*.c)
PROG_CXX_SRCS := $(filter-out tests/progs/lib%,$(wildcard tests/progs/*.cc))
PROG_CXX_SO_SRCS := $(wildcard tests/progs/lib*.cc)
PROG_BINS := $(patsubst tests/progs/%.c,$(OUT)/progs/%,$(PROG_C_SRCS)) \
	$(patsubst tests/progs/%.cc,$(OUT)/progs/%,$(PROG_CXX_SRCS)) \
	$(patsubst tests/progs/%.c,$(OUT)/progs/%.so,$(PROG_SO_SRCS)) \
	$(patsubst tests/progs/%.cc,$(OUT)/progs/%.so,$(PROG_CXX_SO_SRCS))
# A shim without the verify probe, standing in for one older than llgo-heap verify.
PROG_BINS += $(OUT)/progs/libllgoheap-noprobe.so
# nofp_chains and libnofp_dl again, with .debug_frame as their only CFI (dbgframe_*, below),
# and with .eh_frame but no .eh_frame_hdr (noehhdr_chains).
PROG_BINS += $(OUT)/progs/dbgframe_chains $(OUT)/progs/libdbgframe_dl.so \
	$(OUT)/progs/dbgframe_fp_chains $(OUT)/progs/noehhdr_chains
# attach_idle linked -static: llgo-heap attach refuses it (tests/test_attach.c)
PROG_BINS += $(OUT)/progs/attach_idle_static
# nofp_stl again with frame pointers (fp_stl) and with the program's own operator new, out
# of line (nofp_stl_newrep) and inlined (nofp_stl_newinl), for test_unwind's comparison with
# heaptrack.
PROG_BINS += $(OUT)/progs/fp_stl $(OUT)/progs/nofp_stl_newrep $(OUT)/progs/nofp_stl_newinl
$(OUT)/progs/nofp_stl_newrep $(OUT)/progs/nofp_stl_newinl $(OUT)/progs/libnofp_stlnew.so: \
	tests/progs/stl_new.h

BINS := $(OUT)/bin/llgo-heapd $(OUT)/bin/llgo-heap $(OUT)/bin/llgo-heap-symbolizer
LIBS := $(OUT)/lib/libllgoheap.so $(OUT)/lib/libllgoheap.a

.PHONY: all deps test unit e2e demo bench bench-peers bench-inuse bench-services bench-unwind bench-verify bench-attach clean install check-deps
all: $(BINS) $(LIBS)

# ---- build -----------------------------------------------------------------------------

# The C++ operators: exceptions thrown by a new_handler or by libstdc++'s operator new unwind
# through their frames (unwind tables whatever the compiler's default); their fast path calls
# the real malloc without a frame pointer, as libstdc++'s does (the functions that need a frame
# force one, see override_cxx.c).
$(OUT)/obj/shim/override_cxx.o: CFLAGS_SHIM += -fasynchronous-unwind-tables -fomit-frame-pointer

$(OUT)/obj/shim/%.o: shim/%.c Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_SHIM) $(DEPFLAGS) -c $< -o $@

$(OUT)/obj/agent/%.o: agent/%.c Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

$(OUT)/obj/symbolizer/%.o: symbolizer/%.c Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

$(OUT)/obj/client/%.o: client/%.c Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

# ---- the BPF program of llgo-heap verify (agent/verify.bpf.c) ---------------------------
# vmlinux.h comes from the running kernel's BTF (bpftool btf dump). Where the build machine
# has no /sys/kernel/btf/vmlinux, the program is built against the kernel's UAPI headers
# instead (agent/verify_nobtf.h): it reads only pt_regs, whose layout is UAPI.
BTF_VMLINUX ?= /sys/kernel/btf/vmlinux
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror \
	-I$(OUT)/bpf -I/usr/include/$(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

$(OUT)/bpf/vmlinux.h:
	@mkdir -p $(dir $@)
	$(Q)if [ -r $(BTF_VMLINUX) ]; then \
		echo "  BTF      $@ (generated from $(BTF_VMLINUX))"; \
		bpftool btf dump file $(BTF_VMLINUX) format c > $@.tmp && mv $@.tmp $@; \
	else \
		echo "  BTF      $(BTF_VMLINUX) missing: verify.bpf.c builds against UAPI headers (agent/verify_nobtf.h)"; \
		cp agent/verify_nobtf.h $@; \
	fi

$(OUT)/bpf/verify.bpf.o: agent/verify.bpf.c shared/verify.h $(OUT)/bpf/vmlinux.h Makefile
	$(call msg,BPF,$@)
	$(Q)clang $(BPF_CFLAGS) -c $< -o $@.tmp && llvm-strip -g $@.tmp -o $@ && rm -f $@.tmp

$(OUT)/bpf/verify.bpf.skel.h: $(OUT)/bpf/verify.bpf.o
	$(call msg,SKEL,$@)
	$(Q)bpftool gen skeleton $< name verify_bpf > $@.tmp && mv $@.tmp $@

$(OUT)/obj/agent/verify.o: $(OUT)/bpf/verify.bpf.skel.h
$(OUT)/obj/agent/verify.o: CFLAGS_AGENT += -I$(OUT)/bpf

# The OOM watch (agent/oom.bpf.c, --dump-oom): CO-RE against a local definition of the
# task_struct fields it reads, so it needs no vmlinux.h; the kernel's BTF is needed at run
# time (agent/oom.c falls back to the cgroups' counters without it).
$(OUT)/bpf/oom.bpf.o: agent/oom.bpf.c shared/oom.h Makefile
	$(call msg,BPF,$@)
	@mkdir -p $(dir $@)
	$(Q)clang $(BPF_CFLAGS) -c $< -o $@.tmp && llvm-strip -g $@.tmp -o $@ && rm -f $@.tmp

$(OUT)/bpf/oom.bpf.skel.h: $(OUT)/bpf/oom.bpf.o
	$(call msg,SKEL,$@)
	$(Q)bpftool gen skeleton $< name oom_skel > $@.tmp && mv $@.tmp $@

$(OUT)/obj/agent/oom.o: $(OUT)/bpf/oom.bpf.skel.h
$(OUT)/obj/agent/oom.o: CFLAGS_AGENT += -I$(OUT)/bpf

$(OUT)/lib/libllgoheap.so: $(SHIM_OBJS) shim/libllgoheap.map
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared -o $@ $(SHIM_OBJS) -Wl,--version-script=shim/libllgoheap.map \
		-Wl,-z,now -Wl,-z,relro -Wl,--sort-section=alignment -ldl -pthread

# The shim's code in the archives goes to its own section, llgo_heap_text: the linker then
# defines __start_/__stop_llgo_heap_text, the exact range stack.c trims, whichever program or
# library the archive is linked into (not that whole object).
SHIM_TEXT_RENAME := $(foreach t,.text .text.unlikely .text.hot .text.startup .text.exit,\
	--rename-section $(t)=llgo_heap_text,alloc,load,readonly,code,contents)

# One relocatable object with every hidden symbol made local, so the archive adds only the
# llgo_heap_* API and the allocation functions to a program's namespace (no clash with a
# user's emit_init or stack_init). One object: a program that references any of its symbols
# (malloc, as every program does, or the hook) gets all of it, constructor included. The
# allocation functions (the names libllgoheap.map exports, but the API, that the object
# defines: an undefined reference made weak, such as prctl's, would stay unresolved in a
# -static link) are weak: a program that defines its own malloc or operator new keeps it,
# and in a -static link libc.a's win.
$(OUT)/obj/shim/libllgoheap-weak.txt: shim/libllgoheap.map Makefile
	@mkdir -p $(dir $@)
	$(Q)sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\);$$/\1/p' $< | grep -v '^llgo_heap_' > $@

$(OUT)/lib/libllgoheap.a: $(SHIM_ARCHIVE_OBJS) $(OUT)/obj/shim/libllgoheap-weak.txt
	$(call msg,AR,$@)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ $(OUT)/obj/shim/libllgoheap-all.o && \
		$(LD) -r -o $(OUT)/obj/shim/libllgoheap-all.o $(SHIM_ARCHIVE_OBJS) && \
		{ $(NM) -g --defined-only $(OUT)/obj/shim/libllgoheap-all.o | awk '{print $$3}' | \
			grep -xF -f $(OUT)/obj/shim/libllgoheap-weak.txt || true; } \
			> $(OUT)/obj/shim/libllgoheap-all.weak && \
		$(OBJCOPY) --localize-hidden $(SHIM_TEXT_RENAME) \
			--weaken-symbols=$(OUT)/obj/shim/libllgoheap-all.weak \
			$(OUT)/obj/shim/libllgoheap-all.o && \
		ar rcs $@ $(OUT)/obj/shim/libllgoheap-all.o

$(OUT)/bin/llgo-heapd: $(OUT)/obj/agent/daemon.o $(AGENT_COMMON_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_AGENT)

$(OUT)/bin/llgo-heap-symbolizer: $(SYMBOLIZER_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_SYMBOLIZER)

# The same with test hooks (symbolizer/symserver.c: a function named sandbox_test_crash
# aborts it, sandbox_test_hang hangs it): tests/test_sandbox.c only, never installed.
$(OUT)/tests/llgo-heap-symbolizer-hooks: $(SYMBOLIZER_SRCS) $(HEADERS) Makefile
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -DSYMSERVER_TEST_HOOKS -o $@ $(SYMBOLIZER_SRCS) $(LIBS_SYMBOLIZER)

$(OUT)/bin/llgo-heap: $(CLI_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_CLI)

# Every test's daemon launcher and client (tests/heapd.c over client/client.c), built once.
TEST_LIB_OBJS := $(OUT)/obj/tests/heapd.o $(CLIENT_OBJS) $(PPROFREAD_OBJS)
TEST_DEFS := -DLLGO_BUILD_DIR='"$(abspath $(OUT))"' -DLLGO_SRC_DIR='"$(CURDIR)"' \
	-DLLGO_PLAIN_SHIM='"$(abspath $(OUT))/lib/libllgoheap.so"' $(filter -I%,$(TEST_CRITERION))

$(OUT)/obj/tests/heapd.o: tests/heapd.c Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) $(TEST_DEFS) -DLLGO_T_HELPER -c $< -o $@

# Unit tests link the agent objects and the shim objects they exercise (never override.o:
# a criterion binary keeps its own malloc).
$(OUT)/tests/%: tests/%.c $(AGENT_COMMON_OBJS) $(SHIM_LIB_OBJS) $(TEST_LIB_OBJS) Makefile | $(BINS) $(LIBS) $(PROG_BINS) $(OUT)/tests/llgo-heap-symbolizer-hooks
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -MF $@.d $(TEST_DEFS) -o $@ $< $(AGENT_COMMON_OBJS) \
		$(SHIM_LIB_OBJS) $(TEST_LIB_OBJS) $(LIBS_AGENT) $(filter -l%,$(TEST_CRITERION)) -lm -ldl

# Programs profiled by the end-to-end tests: plain, frame pointers on, never sanitized.
PROG_CFLAGS := -std=gnu11 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread
$(OUT)/progs/%: tests/progs/%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -o $@ $< -ldl -lm

$(OUT)/progs/libllgoheap-noprobe.so: $(SHIM_SRCS) $(HEADERS) shim/libllgoheap.map Makefile
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_SHIM) -DLLGO_HEAP_TEST_NO_PROBE -shared -o $@ $(SHIM_SRCS) \
		-Wl,--version-script=shim/libllgoheap.map -Wl,-z,now -Wl,-z,relro -Wl,--sort-section=alignment -ldl -pthread

$(OUT)/progs/%.so: tests/progs/%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -shared -fPIC -o $@ $<

$(OUT)/progs/%: tests/progs/%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $<

$(OUT)/progs/%.so: tests/progs/%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
		-shared -fPIC -o $@ $<

$(OUT)/progs/attach_idle_static: tests/progs/attach_idle.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -static -o $@ $<

PROG_NOFP_CFLAGS := $(filter-out -fno-omit-frame-pointer,$(PROG_CFLAGS)) -fomit-frame-pointer
$(OUT)/progs/nofp_%: tests/progs/nofp_%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_NOFP_CFLAGS) -o $@ $< -ldl -lm

# nofp_verify is verify_fp.c built without frame pointers
$(OUT)/progs/nofp_verify: tests/progs/verify_fp.c

$(OUT)/progs/libnofp_%.so: tests/progs/libnofp_%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_NOFP_CFLAGS) -shared -fPIC -o $@ $<

$(OUT)/progs/libnofp_%.so: tests/progs/libnofp_%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fomit-frame-pointer -Wall -Wextra -Werror -shared -fPIC \
		-o $@ $<

# .debug_frame as the code's only CFI (no .eh_frame but the crt files'), as some programs
# ship (issue 9): without frame pointers, and with them (auto mode's classification).
PROG_DBGFRAME_CFLAGS := $(PROG_NOFP_CFLAGS) -fno-asynchronous-unwind-tables -fno-unwind-tables
$(OUT)/progs/dbgframe_chains: tests/progs/nofp_chains.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_DBGFRAME_CFLAGS) -o $@ $< -ldl -lm

$(OUT)/progs/dbgframe_fp_chains: tests/progs/nofp_chains.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out -fomit-frame-pointer,$(PROG_DBGFRAME_CFLAGS)) -fno-omit-frame-pointer \
		-o $@ $< -ldl -lm

$(OUT)/progs/noehhdr_chains: tests/progs/nofp_chains.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_NOFP_CFLAGS) -Wl,--no-eh-frame-hdr -o $@ $< -ldl -lm

$(OUT)/progs/libdbgframe_dl.so: tests/progs/libnofp_dl.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_DBGFRAME_CFLAGS) -shared -fPIC -o $@ $<

$(OUT)/progs/nofp_%: tests/progs/nofp_%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fomit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $<

$(OUT)/progs/nofp_stl_newrep: tests/progs/nofp_stl.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fomit-frame-pointer -DSTL_REPLACE_NEW -Wall -Wextra -Werror \
		-pthread -o $@ $<

$(OUT)/progs/nofp_stl_newinl: tests/progs/nofp_stl.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fomit-frame-pointer -DSTL_REPLACE_NEW -DSTL_NEW_INLINE -Wall \
		-Wextra -Werror -pthread -o $@ $<

$(OUT)/progs/fp_stl: tests/progs/nofp_stl.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $<

# ---- deps ------------------------------------------------------------------------------

DEB_PKGS := gcc g++ make pkg-config libelf-dev libdw-dev zlib1g-dev libcriterion-dev \
	libmicrohttpd-dev libbpf-dev libunwind-dev bpftool clang llvm golang-go valgrind \
	sqlite3 python3 procps systemtap-sdt-dev tmux heaptrack libc6-dbg
# Real programs the end-to-end tests profile (tests/test_hostprogs.c, tests/test_hostile.c):
# a Rust program built with Debian's rustc, java -version, git log, perl -e, and jemalloc
# preloaded before and after the shim.
DEB_PKGS += rustc default-jre-headless git perl libjemalloc2
DEB_PKGS += prometheus curl # tests/test_fleet.c: promtool, a real Prometheus, and curl
# tests/test_service.c: systemd-analyze (verify, security, syscall-filter) and
# systemd-socket-activate (no systemd as PID 1 needed), strace (the daemon's system calls
# against the unit's filter). binutils: readelf, nm, objcopy, objdump of the tests.
DEB_PKGS += systemd strace binutils
DEB_PKGS += debuginfod # tests/test_debuginfod.c: a local debuginfod serving a folder
DEB_PKGS += libdebuginfod-dev # agent/symfile.c asks debuginfod itself (debuginfod_find_debuginfo)
DEB_PKGS += libcurl4-openssl-dev # agent/push.c: llgo-heapd --push URL (Pyroscope's /ingest)

deps:
	@missing=$$(for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' \
		|| echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all present"; exit 0; fi; \
	echo "deps: installing$$(echo $$missing | sed 's/^/ /')"; \
	if [ "$$(id -u)" != 0 ]; then echo "deps: run as root (or sudo make deps)" >&2; exit 1; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q --no-install-recommends $$missing >/dev/null \
	|| { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
		$$missing >/dev/null; }

# ---- tests -----------------------------------------------------------------------------

test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory unit

# The stress tests saturate the machine on purpose, each on its own (two at once starve each
# other's daemon): their file runs one test at a time.
unit: $(TEST_BINS) $(PROG_BINS) $(BINS) $(LIBS)
	@fail=0; for t in $(TEST_BINS); do \
		echo "== $$t"; \
		jobs=2; case $$t in */test_stress) jobs=1;; esac; \
		LLGO_SAN='$(SAN)' TSAN_OPTIONS="halt_on_error=1 suppressions=$(abspath tests/tsan.supp)" LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
			$$t --jobs=$$jobs --timeout=600 || fail=1; \
	done; \
	echo "== fuzz corpora (tests/fuzz/corpus, tests/fuzz/regress)"; \
	$(MAKE) --no-print-directory fuzz-replay || fail=1; \
	if [ $$fail = 0 ]; then echo "ALL TESTS PASSED ($(OUT))"; else echo "TESTS FAILED"; exit 1; fi

# ---- demo ------------------------------------------------------------------------------

demo: deps
	$(Q)$(MAKE) --no-print-directory all $(OUT)/progs/demo
	@echo "== profiling $(OUT)/progs/demo under llgo-heap run"
	$(OUT)/bin/llgo-heap run -o demo.pb.gz -- $(OUT)/progs/demo
	@echo "== go tool pprof -top demo.pb.gz"
	@HOME=$${HOME:-/tmp} go tool pprof -sample_index=alloc_space -top demo.pb.gz 2>/dev/null | head -15
	@echo "wrote demo.pb.gz"

# ---- benchmarks ------------------------------------------------------------------------

bench: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) bench

bench-unwind: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) unwind

bench-peers: deps all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) peers

bench-inuse: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) inuse

bench-services: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) services

bench-verify: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) verify

bench-attach: all
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) attach

clean:
	rm -rf build build-san-*

# ---- install ---------------------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: programs, libraries, header, docs and the
# systemd units (their /usr/local paths rewritten to PREFIX; UNITDIR is where systemd looks
# for units under that prefix). make uninstall removes the same files.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DOCDIR ?= $(PREFIX)/share/doc/llgo-heap
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOC_FILES := README.md $(wildcard docs/*.md) systemd/llgo-heapd.conf.example
UNIT_FILES := systemd/llgo-heapd.service systemd/llgo-heapd.socket
INSTALLED := $(BINDIR)/llgo-heapd $(BINDIR)/llgo-heap $(BINDIR)/llgo-heap-symbolizer $(LIBDIR)/libllgoheap.so \
	$(LIBDIR)/libllgoheap.a $(INCLUDEDIR)/llgo_heap.h $(addprefix $(DOCDIR)/,$(notdir $(DOC_FILES))) \
	$(addprefix $(UNITDIR)/,$(notdir $(UNIT_FILES)))

.PHONY: uninstall
install: all
	install -D -m 755 $(OUT)/bin/llgo-heapd $(DESTDIR)$(BINDIR)/llgo-heapd
	install -D -m 755 $(OUT)/bin/llgo-heap $(DESTDIR)$(BINDIR)/llgo-heap
	install -D -m 755 $(OUT)/bin/llgo-heap-symbolizer $(DESTDIR)$(BINDIR)/llgo-heap-symbolizer
	install -D -m 755 $(OUT)/lib/libllgoheap.so $(DESTDIR)$(LIBDIR)/libllgoheap.so
	install -D -m 644 $(OUT)/lib/libllgoheap.a $(DESTDIR)$(LIBDIR)/libllgoheap.a
	install -D -m 644 include/llgo_heap.h $(DESTDIR)$(INCLUDEDIR)/llgo_heap.h
	install -d $(DESTDIR)$(DOCDIR) $(DESTDIR)$(UNITDIR)
	install -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	for u in $(UNIT_FILES); do \
		sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/usr/local/share/doc/llgo-heap/|$(DOCDIR)/|g' \
			$$u > $(DESTDIR)$(UNITDIR)/$$(basename $$u).tmp && \
		chmod 644 $(DESTDIR)$(UNITDIR)/$$(basename $$u).tmp && \
		mv $(DESTDIR)$(UNITDIR)/$$(basename $$u).tmp $(DESTDIR)$(UNITDIR)/$$(basename $$u) || exit 1; \
	done

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null || true

# ---- targets without a stack source: the size-class fallback recorder (issue 14) ---------
# shim/fallback/ is freestanding and depends on nothing else here. tests/test_fallback.c runs
# Go's heapsampling check on its text natively, as wasm32-wasi under Node's WASI and on a
# bare-metal Cortex-M3 under qemu-system-arm (semihosting). A target whose compiler or
# runner is missing gets a .skip file with the reason instead of its program, and the test
# reports it as skipped; with the toolchain present, a build failure is an error.

DEB_PKGS += lld wasi-libc libclang-rt-14-dev-wasm32 nodejs gcc-arm-none-eabi qemu-system-arm

FB_OUT := $(OUT)/fallback
FB_SRCS := shim/fallback/llgo_fallback.c tests/fallback/hs.c
FB_DEPS := $(FB_SRCS) shim/fallback/llgo_fallback.h tests/fallback/hs.h Makefile
FB_CFLAGS := -std=c11 -g -O2 -Wall -Wextra -Werror -Wundef -Wstrict-prototypes
WASI_CC ?= clang
CM_CC ?= arm-none-eabi-gcc
CM_CFLAGS := -mcpu=cortex-m3 -mthumb -ffreestanding -nostdlib

.PHONY: fallback-progs test-fallback
fallback-progs: $(FB_OUT)/hs-native $(FB_OUT)/hs.wasm $(FB_OUT)/hs-cortex-m3.elf

$(FB_OUT)/hs-native: $(FB_DEPS) tests/fallback/hosted_main.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(FB_CFLAGS) -o $@ $(FB_SRCS) tests/fallback/hosted_main.c

# The probes test the toolchain with an empty program, never with our sources.
$(FB_OUT)/hs.wasm: $(FB_DEPS) tests/fallback/hosted_main.c
	@mkdir -p $(dir $@); rm -f $(FB_OUT)/wasm32-wasi.skip
	$(Q)if ! command -v node >/dev/null; then \
		echo "node (Debian package nodejs) is not installed" > $(FB_OUT)/wasm32-wasi.skip; \
	elif ! echo 'int main(void){return 0;}' | $(WASI_CC) --target=wasm32-wasi -x c - \
		-o $(FB_OUT)/probe.wasm >/dev/null 2>&1; then \
		echo "$(WASI_CC) --target=wasm32-wasi cannot link a program (Debian packages" \
			"clang, lld, wasi-libc, libclang-rt-14-dev-wasm32)" > $(FB_OUT)/wasm32-wasi.skip; \
	else \
		$(if $(filter 1,$(V)),,printf '  %-8s %s\n' CC $@;) \
		$(WASI_CC) --target=wasm32-wasi $(FB_CFLAGS) -o $@ $(FB_SRCS) \
			tests/fallback/hosted_main.c; \
	fi; rm -f $(FB_OUT)/probe.wasm
	@if [ -f $(FB_OUT)/wasm32-wasi.skip ]; then \
		echo "  SKIP     wasm32-wasi: $$(cat $(FB_OUT)/wasm32-wasi.skip)"; fi

$(FB_OUT)/hs-cortex-m3.elf: $(FB_DEPS) tests/fallback/cortexm.c tests/fallback/cortexm.ld
	@mkdir -p $(dir $@); rm -f $(FB_OUT)/cortex-m3.skip
	$(Q)if ! command -v qemu-system-arm >/dev/null; then \
		echo "qemu-system-arm (Debian package qemu-system-arm) is not installed" \
			> $(FB_OUT)/cortex-m3.skip; \
	elif ! echo 'void _start(void){for(;;);}' | $(CM_CC) $(CM_CFLAGS) -x c - \
		-o $(FB_OUT)/probe.elf >/dev/null 2>&1; then \
		echo "$(CM_CC) cannot link for Cortex-M3 (Debian package gcc-arm-none-eabi)" \
			> $(FB_OUT)/cortex-m3.skip; \
	else \
		$(if $(filter 1,$(V)),,printf '  %-8s %s\n' CC $@;) \
		$(CM_CC) $(CM_CFLAGS) $(FB_CFLAGS) -T tests/fallback/cortexm.ld -o $@ $(FB_SRCS) \
			tests/fallback/cortexm.c -lgcc; \
	fi; rm -f $(FB_OUT)/probe.elf
	@if [ -f $(FB_OUT)/cortex-m3.skip ]; then \
		echo "  SKIP     cortex-m3: $$(cat $(FB_OUT)/cortex-m3.skip)"; fi

# The unit test compiles the recorder in (#include) and runs the programs above.
$(OUT)/tests/test_fallback: shim/fallback/llgo_fallback.c shim/fallback/llgo_fallback.h | fallback-progs

test-fallback: deps
	$(Q)$(MAKE) --no-print-directory fallback-progs $(OUT)/tests/test_fallback
	$(OUT)/tests/test_fallback --jobs=2 --timeout=600

# ---- linked shim: -lllgoheap, fully static executables, pkg-config (issue 14) -------------
# A program links libllgoheap.so (-lllgoheap: its malloc precedes libc's in the lookup order,
# as with LD_PRELOAD) or, fully static (glibc static), libllgoheap-static.a with the linker's
# --wrap for each allocation function (shim/static/wrap.c). The pkg-config files say how:
#   cc prog.c $(pkg-config --cflags --libs llgoheap)                   dynamic
#   cc -static prog.c $(pkg-config --cflags --libs llgoheap-static)    fully static
#   cc -DLLGO_HEAP_PROFILING alloc.c $(pkg-config --cflags --libs --static llgoheap)
#                                                  the hook (and malloc) from libllgoheap.a
# build/lib/pkgconfig/ points into this tree; make install writes copies for $(PREFIX).

LLGO_HEAP_VERSION := 0.1.0
OBJCOPY ?= objcopy
NM ?= nm
STATIC_WRAP := malloc calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc \
	pvalloc
STATIC_WRAP_FLAGS := -Wl,$(subst $(eval) ,$(comma),$(patsubst %,--wrap=%,$(STATIC_WRAP)))
PC_DIR := $(OUT)/lib/pkgconfig
PC_FILES := $(PC_DIR)/llgoheap.pc $(PC_DIR)/llgoheap-static.pc

all: $(OUT)/lib/libllgoheap-static.a $(PC_FILES)

$(OUT)/lib/libllgoheap-static.a: $(SHIM_LIB_OBJS) $(OUT)/obj/shim/static/wrap.o
	$(call msg,AR,$@)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ $(OUT)/obj/shim/libllgoheap-static-all.o && \
		$(LD) -r -o $(OUT)/obj/shim/libllgoheap-static-all.o $^ && \
		$(OBJCOPY) --localize-hidden $(SHIM_TEXT_RENAME) $(OUT)/obj/shim/libllgoheap-static-all.o && \
		ar rcs $@ $(OUT)/obj/shim/libllgoheap-static-all.o

# pc_write(file, prefix, libdir, includedir)
define pc_write
	@mkdir -p $(dir $(1))
	@printf '%s\n' 'prefix=$(2)' 'libdir=$(3)' 'includedir=$(4)' '' \
		'Name: llgoheap' \
		'Description: llgo-heap in-process sampler: malloc interposition and allocation hook' \
		'Version: $(LLGO_HEAP_VERSION)' \
		'Cflags: -I$${includedir}' \
		'Libs: -L$${libdir} -lllgoheap' \
		'Libs.private: -ldl -pthread' > $(1)
	@printf '%s\n' 'prefix=$(2)' 'libdir=$(3)' 'includedir=$(4)' '' \
		'Name: llgoheap-static' \
		'Description: llgo-heap in-process sampler for fully static executables (link with -static)' \
		'Version: $(LLGO_HEAP_VERSION)' \
		'Cflags: -I$${includedir}' \
		'Libs: $(STATIC_WRAP_FLAGS) $${libdir}/libllgoheap-static.a -pthread' > $(dir $(1))llgoheap-static.pc
endef

$(PC_FILES) &: Makefile
	$(call msg,GEN,$(PC_FILES))
	$(call pc_write,$(PC_DIR)/llgoheap.pc,$(abspath $(OUT)),$${prefix}/lib,$(CURDIR)/include)

# ---- selection and zero-cost proofs (issue 14) ---------------------------------------------
# tests/test_select.c reads the symbol tables and the disassembly of these builds of one
# program with a custom allocator: without LLGO_HEAP_PROFILING (plain, -flto), with it linked
# with libllgoheap.a, with libllgoheap.so (through pkg-config) and with GCC LTO; and a plugin
# carrying its own copy of the sampler, loaded into a preloaded program.

SEL_OUT := $(OUT)/select
SEL_SRCS := tests/select/sel_main.c tests/select/sel_alloc.c
SEL_CFLAGS := -std=gnu11 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread
SEL_PROGS := $(addprefix $(SEL_OUT)/,sel-plain sel-plain-lto sel-archive sel-shared sel-lto \
	sel-dlopen libsel_pool.so)

.PHONY: select-progs
select-progs: $(SEL_PROGS)

$(SEL_OUT)/sel-plain: $(SEL_SRCS) tests/select/sel.h include/llgo_heap.h
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -o $@ $(SEL_SRCS)

$(SEL_OUT)/sel-plain-lto: $(SEL_SRCS) tests/select/sel.h include/llgo_heap.h
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -flto -o $@ $(SEL_SRCS)

$(SEL_OUT)/sel-archive: $(SEL_SRCS) tests/select/sel.h include/llgo_heap.h $(OUT)/lib/libllgoheap.a
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -DLLGO_HEAP_PROFILING -o $@ $(SEL_SRCS) $(OUT)/lib/libllgoheap.a -ldl

$(SEL_OUT)/sel-shared: $(SEL_SRCS) tests/select/sel.h $(OUT)/lib/libllgoheap.so $(PC_FILES)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -DLLGO_HEAP_PROFILING -o $@ $(SEL_SRCS) \
		$$(PKG_CONFIG_PATH=$(PC_DIR) pkg-config --cflags --libs llgoheap) \
		-Wl,-rpath,$(abspath $(OUT))/lib

$(SEL_OUT)/sel-lto: $(SEL_SRCS) tests/select/sel.h include/llgo_heap.h $(OUT)/lib/libllgoheap.a
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -flto -DLLGO_HEAP_PROFILING -o $@ $(SEL_SRCS) \
		$(OUT)/lib/libllgoheap.a -ldl

$(SEL_OUT)/sel-dlopen: tests/select/sel_dlopen.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -o $@ $< -ldl

$(SEL_OUT)/libsel_pool.so: tests/select/libsel_pool.c include/llgo_heap.h $(OUT)/lib/libllgoheap.a
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SEL_CFLAGS) -shared -fPIC -DLLGO_HEAP_PROFILING -o $@ $< \
		$(OUT)/lib/libllgoheap.a -ldl

$(OUT)/tests/test_select: | select-progs

# Programs that link the shim instead of preloading it (tests/test_linked.c), built with the
# documented pkg-config lines.
LINK_OUT := $(OUT)/linked
LINK_PROGS := $(addprefix $(LINK_OUT)/,sites-dynamic sites-static stress-static sites-archive \
	cxx-archive)

.PHONY: linked-progs install-linked
linked-progs: $(LINK_PROGS)

$(LINK_OUT)/sites-dynamic: tests/progs/e2e_sites.c $(OUT)/lib/libllgoheap.so $(PC_FILES)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -o $@ $< \
		$$(PKG_CONFIG_PATH=$(PC_DIR) pkg-config --cflags --libs llgoheap) \
		-Wl,-rpath,$(abspath $(OUT))/lib

$(LINK_OUT)/sites-static: tests/progs/e2e_sites.c $(OUT)/lib/libllgoheap-static.a $(PC_FILES)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -static -o $@ $< \
		$$(PKG_CONFIG_PATH=$(PC_DIR) pkg-config --cflags --libs llgoheap-static)

$(LINK_OUT)/stress-static: tests/progs/stress_sites.c $(OUT)/lib/libllgoheap-static.a $(PC_FILES)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -static -o $@ $< \
		$$(PKG_CONFIG_PATH=$(PC_DIR) pkg-config --cflags --libs llgoheap-static)

# Dynamic executables that link the archive itself (as a user may: no pkg-config, no -l).
$(LINK_OUT)/sites-archive: tests/progs/e2e_sites.c $(OUT)/lib/libllgoheap.a
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -o $@ $< $(OUT)/lib/libllgoheap.a -ldl

$(LINK_OUT)/cxx-archive: tests/progs/e2e_cxx.cc $(OUT)/lib/libllgoheap.a
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $< $(OUT)/lib/libllgoheap.a -ldl

$(OUT)/tests/test_linked: | linked-progs

# make install also installs the static library, the pkg-config files (for $(PREFIX)) and
# the fallback recorder's sources, which a wasm or bare-metal runtime compiles in.
install: install-linked
uninstall: uninstall-linked
.PHONY: uninstall-linked
uninstall-linked:
	rm -f $(DESTDIR)$(PREFIX)/lib/libllgoheap-static.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap.pc \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap-static.pc \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.h \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.c
	rmdir $(DESTDIR)$(PREFIX)/share/llgo-heap/fallback $(DESTDIR)$(PREFIX)/share/llgo-heap \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig 2>/dev/null || true
install-linked: all
	install -D -m 644 $(OUT)/lib/libllgoheap-static.a $(DESTDIR)$(PREFIX)/lib/libllgoheap-static.a
	$(call pc_write,$(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap.pc,$(PREFIX),$${prefix}/lib,$${prefix}/include)
	install -D -m 644 shim/fallback/llgo_fallback.h \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.h
	install -D -m 644 shim/fallback/llgo_fallback.c \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.c

# ---- arm64 Linux (issue 14) ---------------------------------------------------------------
# The shim and the test programs cross-built for aarch64 into build-arm64/ (a sub-make with
# the cross compiler); tests/test_arm64.c runs them under qemu-aarch64 (user mode, the
# aarch64 libc from the cross sysroot) against the native daemon, which symbolizes the
# aarch64 ELF files. Without the cross compiler, its libc or qemu, $(OUT)/arm64.skip says
# why and the tests are skipped.

DEB_PKGS += gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user

ARM64_OUT := build-arm64
ARM64_CROSS ?= aarch64-linux-gnu-
ARM64_SYSROOT ?= /usr/aarch64-linux-gnu
ARM64_TARGETS := $(addprefix $(ARM64_OUT)/,lib/libllgoheap.so lib/libllgoheap.a \
	lib/libllgoheap-static.a progs/e2e_sites progs/stress_sites progs/heapsampling \
	select/sel-archive linked/sites-static)

.PHONY: arm64-progs test-arm64
arm64-progs:
	@mkdir -p $(OUT); rm -f $(OUT)/arm64.skip
	$(Q)if ! command -v qemu-aarch64 >/dev/null; then \
		echo "qemu-aarch64 (Debian package qemu-user) is not installed" > $(OUT)/arm64.skip; \
	elif [ ! -e $(ARM64_SYSROOT)/lib/ld-linux-aarch64.so.1 ]; then \
		echo "no aarch64 libc in $(ARM64_SYSROOT) (Debian package libc6-dev-arm64-cross)" \
			> $(OUT)/arm64.skip; \
	elif ! echo 'int main(void){return 0;}' | $(ARM64_CROSS)gcc -x c - \
		-o $(OUT)/arm64-probe >/dev/null 2>&1; then \
		echo "$(ARM64_CROSS)gcc cannot link (Debian package gcc-aarch64-linux-gnu)" \
			> $(OUT)/arm64.skip; \
	else \
		mkdir -p $(ARM64_OUT)/sdt-include/sys && \
		cp /usr/include/x86_64-linux-gnu/sys/sdt.h /usr/include/x86_64-linux-gnu/sys/sdt-config.h \
			$(ARM64_OUT)/sdt-include/sys/ && \
		$(MAKE) -s --no-print-directory OUT=$(ARM64_OUT) SAN= CC=$(ARM64_CROSS)gcc \
			LD=$(ARM64_CROSS)ld OBJCOPY=$(ARM64_CROSS)objcopy NM=$(ARM64_CROSS)nm \
			SHIM_EXTRA_CFLAGS="-idirafter $(CURDIR)/$(ARM64_OUT)/sdt-include" \
			$(ARM64_TARGETS) || exit 1; \
	fi; rm -f $(OUT)/arm64-probe
	@if [ -f $(OUT)/arm64.skip ]; then echo "  SKIP     arm64: $$(cat $(OUT)/arm64.skip)"; fi

$(OUT)/tests/test_arm64: | arm64-progs

test-arm64: deps
	$(Q)$(MAKE) --no-print-directory all arm64-progs $(OUT)/tests/test_arm64
	$(OUT)/tests/test_arm64 --jobs=2 --timeout=600

clean: clean-arm64
.PHONY: clean-arm64
clean-arm64:
	rm -rf $(ARM64_OUT)

# ---- fuzzing (issue 12) -------------------------------------------------------------------
# libFuzzer harnesses for every parser of input a profiled process or a local user controls:
# ring records (fuzz_ring), socket messages with their memfds (fuzz_socket, an in-process
# daemon), HTTP request targets and symbol bodies (fuzz_http), ELF/DWARF files given to the
# symbolizer and the CFI rewrite (fuzz_elf), files plus stack copies given to the unwinder
# (fuzz_unwind), and pprof files given to `llgo-heap diff` (fuzz_pprof, client/pprofread.c
# and client/diff.c). `make fuzz` runs each for FUZZ_SECONDS under ASan+UBSan (clang's
# libFuzzer, Debian's libclang-rt-14-dev), growing tests/fuzz/corpus/NAME; a crash is left in
# build-fuzz/crashes/ and belongs in tests/fuzz/regress/NAME once fixed. `make test` replays
# every corpus and regression input through the same harnesses built with the test build's
# compiler and sanitizers (tests/fuzz/replay_main.c, seconds).

FUZZ_NAMES := ring socket http elf unwind pprof
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_OUT := build-fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -pthread $(WARN) \
	-Wno-unknown-warning-option $(FUZZ_SAN) -I$(OUT)/bpf
FUZZ_AGENT_OBJS := $(patsubst agent/%.c,$(FUZZ_OUT)/obj/agent/%.o,$(AGENT_COMMON_SRCS)) \
	$(FUZZ_OUT)/obj/symbolizer/symparse.o
FUZZ_CLIENT_OBJS := $(patsubst %,$(FUZZ_OUT)/obj/client/%.o,client pprofread diff human)
FUZZ_BINS := $(patsubst %,$(FUZZ_OUT)/fuzz_%,$(FUZZ_NAMES))
FUZZ_REPLAYS := $(patsubst %,$(OUT)/fuzz/replay_%,$(FUZZ_NAMES))
FUZZ_HEADERS := $(HEADERS) tests/fuzz/fuzz_util.h

DEB_PKGS += libclang-rt-14-dev

$(FUZZ_OUT)/obj/agent/%.o: agent/%.c Makefile | $(OUT)/bpf/verify.bpf.skel.h $(OUT)/bpf/oom.bpf.skel.h
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/obj/symbolizer/%.o: symbolizer/%.c $(HEADERS) Makefile
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/obj/client/%.o: client/%.c $(HEADERS) Makefile
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_AGENT_OBJS) $(FUZZ_CLIENT_OBJS) $(FUZZ_HEADERS)
	$(call msg,FUZZLD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_AGENT_OBJS) \
		$(FUZZ_CLIENT_OBJS) $(LIBS_AGENT)

# The replay builds: the test build's compiler, flags and sanitizers, no libFuzzer.
$(OUT)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(AGENT_COMMON_OBJS) $(CLIENT_OBJS) $(PPROFREAD_OBJS) $(OUT)/obj/symbolizer/symparse.o $(FUZZ_HEADERS)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $< tests/fuzz/replay_main.c $(AGENT_COMMON_OBJS) \
		$(CLIENT_OBJS) $(PPROFREAD_OBJS) $(OUT)/obj/symbolizer/symparse.o $(LIBS_AGENT)

.PHONY: fuzz fuzz-build fuzz-replay
fuzz-build: $(FUZZ_BINS)
.SECONDARY: $(FUZZ_AGENT_OBJS) $(FUZZ_CLIENT_OBJS)

fuzz: deps
	$(Q)$(MAKE) --no-print-directory fuzz-build
	@mkdir -p $(FUZZ_OUT)/crashes
	@fail=0; for n in $(FUZZ_NAMES); do \
		mkdir -p tests/fuzz/corpus/$$n tests/fuzz/regress/$$n; \
		echo "== fuzz_$$n for $(FUZZ_SECONDS) s"; \
		mkdir -p $(FUZZ_OUT)/corpus/$$n; \
		$(FUZZ_OUT)/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 \
			-max_len=65536 -print_final_stats=1 -artifact_prefix=$(FUZZ_OUT)/crashes/$$n- \
			$(FUZZ_OUT)/corpus/$$n tests/fuzz/corpus/$$n tests/fuzz/regress/$$n \
			2>$(FUZZ_OUT)/fuzz_$$n.log || { fail=1; tail -40 $(FUZZ_OUT)/fuzz_$$n.log; }; \
		grep -E '^stat::(number_of_executed_units|new_units_added)' $(FUZZ_OUT)/fuzz_$$n.log; \
		$(FUZZ_OUT)/fuzz_$$n -merge=1 -max_len=65536 tests/fuzz/corpus/$$n \
			$(FUZZ_OUT)/corpus/$$n 2>>$(FUZZ_OUT)/fuzz_$$n.log >/dev/null || fail=1; \
		echo "tests/fuzz/corpus/$$n: $$(ls tests/fuzz/corpus/$$n | wc -l) inputs"; \
	done; \
	if [ $$fail = 0 ]; then echo "FUZZ: no crash"; else echo "FUZZ: crashes in $(FUZZ_OUT)/crashes"; exit 1; fi

fuzz-replay: $(FUZZ_REPLAYS)
	@fail=0; for n in $(FUZZ_NAMES); do \
		UBSAN_OPTIONS=halt_on_error=1 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
		$(OUT)/fuzz/replay_$$n tests/fuzz/corpus/$$n tests/fuzz/regress/$$n || fail=1; \
	done; [ $$fail = 0 ]

unit: $(FUZZ_REPLAYS)

# The committed seeds of each corpus (tests/fuzz/make_seeds.c); rerun after a format change.
.PHONY: fuzz-seeds
fuzz-seeds: $(AGENT_COMMON_OBJS)
	@mkdir -p $(OUT)/fuzz $(addprefix tests/fuzz/corpus/,$(FUZZ_NAMES))
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -O1 -g0 -s -o $(OUT)/fuzz/make_seeds tests/fuzz/make_seeds.c \
		$(AGENT_COMMON_OBJS) $(LIBS_AGENT)
	$(Q)printf 'static int sq(int x) { return x * x; }\nint fz_main(int a) { return sq(a) + 1; }\n' | \
		$(CC) -x c -g -O1 -shared -fPIC -nostdlib -Wl,--build-id -o $(OUT)/fuzz/tiny.so -
	$(OUT)/fuzz/make_seeds tests/fuzz/corpus $(OUT)/fuzz/tiny.so

# ---- header dependencies (-MMD -MP, see DEPFLAGS) -----------------------------------------
-include $(wildcard $(OUT)/obj/*/*.d $(OUT)/obj/*/*/*.d $(OUT)/tests/*.d \
	$(FUZZ_OUT)/obj/*/*.d)
