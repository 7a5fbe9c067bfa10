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
#   make bench-otel  the cost of OpenTelemetry's otel_memory probes while nothing is attached
#   make bench-attach  what a process pays after llgo-heap attach and detach
#   make SAN=address,undefined test   sanitized daemon, CLI and unit tests in build-san-*/
#
# Sanitizer runtimes own malloc themselves, so under SAN= the LD_PRELOAD shim is still built
# without sanitizers (in the SAN build folder) and the end-to-end tests preload that plain shim
# into real programs while the daemon and CLI that serve them are sanitized.
#
# Each folder's rules are in its build.mk, included below from the bottom of the house up
# (common, shim, symbolizer, agent, client; then the tests' programs and the tests). This file
# keeps the settings every part shares, the package list, and the targets of the whole: deps,
# demo, bench, install, clean. docs/design.md opens with the map of the folders.

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

# Every build file: objects and programs are rebuilt when one changes.
BUILD_MK := Makefile $(wildcard */build.mk */*/build.mk)

# Objects and tests depend on the headers they include (-MMD -MP: $(OUT)/**/*.d, read at the
# end of this file). HEADERS is for the rules that compile several sources in one command
# (gcc then writes one dependency file for the last source only).
DEPFLAGS := -MMD -MP
HEADERS := $(wildcard shared/*.h common/*.h agent/*.h agent/*/*.h client/*.h shim/*.h include/*.h \
	tests/*.h symbolizer/*.h)

# ---- deps --------------------------------------------------------------------------------

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
DEB_PKGS += libdebuginfod-dev # agent/symbol/symfile.c asks debuginfod itself (debuginfod_find_debuginfo)
DEB_PKGS += libcurl4-openssl-dev # agent/dump/push.c: llgo-heapd --push URL (Pyroscope's /ingest)
# (the fallback, arm64 and fuzz builds add theirs in their build.mk)

# ---- the parts, bottom up ----------------------------------------------------------------
include common/build.mk
include shim/build.mk
include symbolizer/build.mk
include agent/build.mk
include client/build.mk

BINS := $(OUT)/bin/llgo-heapd $(OUT)/bin/llgo-heap $(OUT)/bin/llgo-heap-symbolizer
LIBS := $(OUT)/lib/libllgoheap.so $(OUT)/lib/libllgoheap.a

.PHONY: all deps test unit e2e demo bench bench-peers bench-inuse bench-services bench-unwind bench-verify bench-otel bench-attach clean install check-deps
all: $(BINS) $(LIBS)

include tests/progs/build.mk
include tests/build.mk
include tests/select/build.mk
include tests/fallback/build.mk
include tests/fuzz/build.mk

# ---- deps, demo, benchmarks, install -----------------------------------------------------

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

# ---- demo ------------------------------------------------------------------------------

demo: deps
	$(Q)$(MAKE) --no-print-directory all $(OUT)/progs/demo
	@echo "== profiling $(OUT)/progs/demo under llgo-heap run"
	$(OUT)/bin/llgo-heap run -o demo.pb.gz -- $(OUT)/progs/demo
	@echo "== go tool pprof -top demo.pb.gz"
	@HOME=$${HOME:-/tmp} go tool pprof -sample_index=alloc_space -top demo.pb.gz 2>/dev/null | head -15
	@echo "wrote demo.pb.gz"

# ---- benchmarks ------------------------------------------------------------------------

bench: all $(OUT)/bench/libllgoheap-nootel.so
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) bench

bench-otel: all $(OUT)/bench/libllgoheap-nootel.so
	$(Q)$(MAKE) --no-print-directory -C bench OUT=$(abspath $(OUT)) otel

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

# ---- header dependencies (-MMD -MP, see DEPFLAGS) -----------------------------------------
-include $(wildcard $(OUT)/obj/*/*.d $(OUT)/obj/*/*/*.d $(OUT)/tests/*.d \
	$(FUZZ_OUT)/obj/*/*.d $(FUZZ_OUT)/obj/*/*/*.d)
