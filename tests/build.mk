# tests/build.mk: the unit, stress and end-to-end tests (make test), the call circle check,
# and the arm64 cross build the tests run under qemu.

# Criterion 2.4 cannot start under ThreadSanitizer (Snaipe/Criterion#274): with SAN=thread the
# same test files build against tests/nocriterion/, a stand-in with the subset of its API.
ifneq ($(findstring thread,$(SAN)),)
TEST_CRITERION := -Itests/nocriterion
else
TEST_CRITERION := -lcriterion
endif

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRCS))

# Every test's daemon launcher and client (tests/heapd.c over client/client.c) and shared
# fixtures (tests/helpers.c), built once.
TEST_HELPER_OBJS := $(OUT)/obj/tests/heapd.o $(OUT)/obj/tests/helpers.o
TEST_LIB_OBJS := $(TEST_HELPER_OBJS) $(CLIENT_OBJS) $(PPROFREAD_OBJS) $(COMMON_LIB)
TEST_DEFS := -DLLGO_BUILD_DIR='"$(abspath $(OUT))"' -DLLGO_SRC_DIR='"$(CURDIR)"' \
	-DLLGO_PLAIN_SHIM='"$(abspath $(OUT))/lib/libllgoheap.so"' $(filter -I%,$(TEST_CRITERION))

# A static pattern rule: with a plain pattern rule the objects would be intermediate files, and
# make would delete them after each build.
$(TEST_HELPER_OBJS): $(OUT)/obj/tests/%.o: tests/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) $(TEST_DEFS) -DLLGO_T_HELPER -c $< -o $@

# Unit tests link the agent objects and the shim objects they exercise (never override.o:
# a criterion binary keeps its own malloc).
$(OUT)/tests/%: tests/%.c $(AGENT_COMMON_OBJS) $(SHIM_LIB_OBJS) $(TEST_LIB_OBJS) $(BUILD_MK) | $(BINS) $(LIBS) $(PROG_BINS) $(OUT)/tests/llgo-heap-symbolizer-hooks
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -MF $@.d $(TEST_DEFS) -o $@ $< $(AGENT_COMMON_OBJS) \
		$(SHIM_LIB_OBJS) $(TEST_LIB_OBJS) $(LIBS_AGENT) $(filter -l%,$(TEST_CRITERION)) -lm -ldl

# tests/test_otel.c's collector of OpenTelemetry's otel_memory probes (tests/otel_collector.bpf.c).
$(OUT)/bpf/otel_collector.bpf.o: tests/otel_collector.bpf.c tests/otel_collector.h $(OUT)/bpf/vmlinux.h $(BUILD_MK)
	$(call msg,BPF,$@)
	$(Q)clang $(BPF_CFLAGS) -c $< -o $@.tmp && llvm-strip -g $@.tmp -o $@ && rm -f $@.tmp

$(OUT)/bpf/otel_collector.bpf.skel.h: $(OUT)/bpf/otel_collector.bpf.o
	$(call msg,SKEL,$@)
	$(Q)bpftool gen skeleton $< name otel_collector_bpf > $@.tmp && mv $@.tmp $@

$(OUT)/tests/test_otel: $(OUT)/bpf/otel_collector.bpf.skel.h
$(OUT)/tests/test_otel: TEST_DEFS += -I$(OUT)/bpf

# ---- tests -----------------------------------------------------------------------------

test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory unit

# The stress tests saturate the machine on purpose, each on its own (two at once starve each
# other's daemon): their file runs one test at a time. Each file's output is also kept in
# $(OUT)/test-logs/; when something failed, the last lines name the failed tests and their
# messages, criterion's and tests/nocriterion's (CI shows only the tail of the output).
unit: $(TEST_BINS) $(PROG_BINS) $(BINS) $(LIBS)
	@fail=0; failed=""; logs=$(OUT)/test-logs; rm -rf $$logs; mkdir -p $$logs; \
	for t in $(TEST_BINS); do \
		echo "== $$t"; \
		jobs=2; case $$t in */test_stress) jobs=1;; esac; \
		log=$$logs/$${t##*/}.log; \
		{ LLGO_SAN='$(SAN)' TSAN_OPTIONS="halt_on_error=1 suppressions=$(abspath tests/tsan.supp)" LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
			$$t --jobs=$$jobs --timeout=600; echo $$? > $$log.rc; } 2>&1 | tee $$log; \
		if [ "$$(cat $$log.rc)" != 0 ]; then fail=1; failed="$$failed $$log"; fi; \
	done; \
	echo "== fuzz corpora (tests/fuzz/corpus, tests/fuzz/regress)"; \
	$(MAKE) --no-print-directory fuzz-replay || { fail=1; failed="$$failed fuzz-replay"; }; \
	echo "== call circles between source files (make callcircles)"; \
	$(MAKE) --no-print-directory callcircles || { fail=1; failed="$$failed callcircles"; }; \
	if [ $$fail = 0 ]; then echo "ALL TESTS PASSED ($(OUT))"; exit 0; fi; \
	echo "== what failed"; \
	for f in $$failed; do \
		case $$f in *.log) ;; *) echo "$$f failed (its output is above)"; continue;; esac; \
		echo "-- $${f##*/} (exit $$(cat $$f.rc); whole output in $$f)"; \
		grep -E -A2 '^\[(----|FAIL|ERR )\]|CRASH|Synthesis|: (expectation|assertion) failed' $$f | \
			grep -v 'warn: unwind' | tail -n 60; \
	done; \
	echo "TESTS FAILED"; exit 1

# ---- call circles (issue 22) -----------------------------------------------------------
# No two source files may use each other, directly or through a chain (tests/callcircles.py
# reads the objects' symbol tables); make test fails on any such circle.
CALLCIRCLE_OBJS := $(sort $(OUT)/obj/agent/server/daemon.o $(AGENT_COMMON_OBJS) $(COMMON_OBJS) \
	$(filter %.o,$(CLI_OBJS)) $(SYMBOLIZER_OBJS) $(SHIM_OBJS))

.PHONY: callcircles
callcircles: $(CALLCIRCLE_OBJS)
	$(Q)python3 tests/callcircles.py shim/libllgoheap.map $(CALLCIRCLE_OBJS)

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
