# llgo-heap: one entry point for deps, build, tests, benchmarks and the demo.
#
#   make            build into build/ (bin/llgo-heapd, bin/llgo-heap, lib/libllgoheap.{so,a})
#   make deps       install the Debian packages the build and tests need (only missing ones)
#   make test       deps + build + every test (criterion unit, stress and end-to-end)
#   make demo       deps + build + profile a sample program, print top sites, write a pprof
#   make bench      allocation microbenchmarks (see docs/performance.md)
#   make bench-unwind  the DWARF unwinding rows of make bench alone
#   make SAN=address,undefined test   sanitized daemon, CLI and unit tests in build-san-*/
#
# Sanitizer runtimes own malloc themselves, so under SAN= the LD_PRELOAD shim is still built
# without sanitizers (in the SAN build folder) and the end-to-end tests preload that plain shim
# into real programs while the daemon and CLI that serve them are sanitized.

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
CFLAGS_SHIM := $(BASE_CFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec \
	-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
	-fno-stack-protector -pthread
LIBS_AGENT := -lelf -ldw -lz -lmicrohttpd -lunwind-x86_64 -lunwind -lpthread -lm

# Criterion 2.4 cannot start under ThreadSanitizer (Snaipe/Criterion#274): with SAN=thread the
# same test files build against tests/nocriterion/, a stand-in with the subset of its API.
ifneq ($(findstring thread,$(SAN)),)
TEST_CRITERION := -Itests/nocriterion
else
TEST_CRITERION := -lcriterion
endif

SHIM_SRCS := $(wildcard shim/*.c)
SHIM_OBJS := $(patsubst shim/%.c,$(OUT)/obj/shim/%.o,$(SHIM_SRCS))
# The static archive is the hook API for linked allocators: no malloc interposition.
SHIM_LIB_OBJS := $(filter-out $(OUT)/obj/shim/override%.o,$(SHIM_OBJS))

AGENT_COMMON_SRCS := $(filter-out agent/daemon.c agent/cli.c,$(wildcard agent/*.c))
AGENT_COMMON_OBJS := $(patsubst agent/%.c,$(OUT)/obj/agent/%.o,$(AGENT_COMMON_SRCS))

HEADERS := $(wildcard shared/*.h agent/*.h shim/*.h include/*.h tests/*.h)

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRCS))
# tests/progs/nofp_* (and libnofp_*) are built the way most programs ship: -O2 without frame
# pointers (issue 9: DWARF unwinding); everything else keeps frame pointers.
PROG_C_SRCS := $(filter-out tests/progs/lib%,$(wildcard tests/progs/*.c))
PROG_SO_SRCS := $(wildcard tests/progs/lib*.c)
PROG_CXX_SRCS := $(wildcard tests/progs/*.cc)
PROG_BINS := $(patsubst tests/progs/%.c,$(OUT)/progs/%,$(PROG_C_SRCS)) \
	$(patsubst tests/progs/%.cc,$(OUT)/progs/%,$(PROG_CXX_SRCS)) \
	$(patsubst tests/progs/%.c,$(OUT)/progs/%.so,$(PROG_SO_SRCS))

BINS := $(OUT)/bin/llgo-heapd $(OUT)/bin/llgo-heap
LIBS := $(OUT)/lib/libllgoheap.so $(OUT)/lib/libllgoheap.a

.PHONY: all deps test unit e2e demo bench bench-peers bench-unwind clean install check-deps
all: $(BINS) $(LIBS)

# ---- build -----------------------------------------------------------------------------

$(OUT)/obj/shim/%.o: shim/%.c $(HEADERS) Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_SHIM) -c $< -o $@

$(OUT)/obj/agent/%.o: agent/%.c $(HEADERS) Makefile
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -c $< -o $@

$(OUT)/lib/libllgoheap.so: $(SHIM_OBJS) shim/libllgoheap.map
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared -o $@ $(SHIM_OBJS) -Wl,--version-script=shim/libllgoheap.map \
		-Wl,-z,now -Wl,-z,relro -ldl -pthread

# One relocatable object with every hidden symbol made local, so the archive adds only the
# llgo_heap_* API to a program's namespace (no clash with a user's emit_init or stack_init).
$(OUT)/lib/libllgoheap.a: $(SHIM_LIB_OBJS)
	$(call msg,AR,$@)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ $(OUT)/obj/shim/libllgoheap-all.o && \
		$(LD) -r -o $(OUT)/obj/shim/libllgoheap-all.o $(SHIM_LIB_OBJS) && \
		objcopy --localize-hidden $(OUT)/obj/shim/libllgoheap-all.o && \
		ar rcs $@ $(OUT)/obj/shim/libllgoheap-all.o

$(OUT)/bin/llgo-heapd: $(OUT)/obj/agent/daemon.o $(AGENT_COMMON_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_AGENT)

$(OUT)/bin/llgo-heap: $(OUT)/obj/agent/cli.o $(AGENT_COMMON_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_AGENT)

# Unit tests link the agent objects and the shim objects they exercise (never override.o:
# a criterion binary keeps its own malloc).
$(OUT)/tests/%: tests/%.c $(AGENT_COMMON_OBJS) $(SHIM_LIB_OBJS) $(HEADERS) | $(BINS) $(LIBS) $(PROG_BINS)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -DLLGO_BUILD_DIR='"$(abspath $(OUT))"' -DLLGO_SRC_DIR='"$(CURDIR)"' \
		-DLLGO_PLAIN_SHIM='"$(abspath $(OUT))/lib/libllgoheap.so"' \
		$(filter -I%,$(TEST_CRITERION)) -o $@ $< $(AGENT_COMMON_OBJS) $(SHIM_LIB_OBJS) \
		$(LIBS_AGENT) $(filter -l%,$(TEST_CRITERION)) -lm -ldl

# Programs profiled by the end-to-end tests: plain, frame pointers on, never sanitized.
PROG_CFLAGS := -std=gnu11 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread
$(OUT)/progs/%: tests/progs/%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -o $@ $< -ldl -lm

$(OUT)/progs/%.so: tests/progs/%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -shared -fPIC -o $@ $<

$(OUT)/progs/%: tests/progs/%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $<

PROG_NOFP_CFLAGS := $(filter-out -fno-omit-frame-pointer,$(PROG_CFLAGS)) -fomit-frame-pointer
$(OUT)/progs/nofp_%: tests/progs/nofp_%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_NOFP_CFLAGS) -o $@ $< -ldl -lm

$(OUT)/progs/libnofp_%.so: tests/progs/libnofp_%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_NOFP_CFLAGS) -shared -fPIC -o $@ $<

$(OUT)/progs/nofp_%: tests/progs/nofp_%.cc
	$(call msg,CXX,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O2 -fomit-frame-pointer -Wall -Wextra -Werror -pthread \
		-o $@ $<

# ---- deps ------------------------------------------------------------------------------

DEB_PKGS := gcc g++ make pkg-config libelf-dev libdw-dev zlib1g-dev libcriterion-dev \
	libmicrohttpd-dev libbpf-dev libunwind-dev bpftool clang llvm golang-go valgrind \
	sqlite3 python3 procps heaptrack libc6-dbg

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

unit: $(TEST_BINS) $(PROG_BINS) $(BINS) $(LIBS)
	@fail=0; for t in $(TEST_BINS); do \
		echo "== $$t"; \
		LLGO_SAN='$(SAN)' TSAN_OPTIONS=halt_on_error=1 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
			$$t --jobs=2 --timeout=600 || fail=1; \
	done; \
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

clean:
	rm -rf build build-san-*

PREFIX ?= /usr/local
install: all
	install -D -m 755 $(OUT)/bin/llgo-heapd $(DESTDIR)$(PREFIX)/bin/llgo-heapd
	install -D -m 755 $(OUT)/bin/llgo-heap $(DESTDIR)$(PREFIX)/bin/llgo-heap
	install -D -m 755 $(OUT)/lib/libllgoheap.so $(DESTDIR)$(PREFIX)/lib/libllgoheap.so
	install -D -m 644 $(OUT)/lib/libllgoheap.a $(DESTDIR)$(PREFIX)/lib/libllgoheap.a
	install -D -m 644 include/llgo_heap.h $(DESTDIR)$(PREFIX)/include/llgo_heap.h
	install -D -m 644 systemd/llgo-heapd.service $(DESTDIR)/lib/systemd/system/llgo-heapd.service
	install -D -m 644 systemd/llgo-heapd.socket $(DESTDIR)/lib/systemd/system/llgo-heapd.socket
