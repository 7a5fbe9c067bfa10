# tests/fuzz/build.mk: libFuzzer harnesses (make fuzz) and their replay in make test.

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
	$(patsubst common/%.c,$(FUZZ_OUT)/obj/common/%.o,$(COMMON_SRCS)) \
	$(FUZZ_OUT)/obj/symbolizer/symparse.o
FUZZ_CLIENT_OBJS := $(patsubst %,$(FUZZ_OUT)/obj/client/%.o,client pprofread diff human)
FUZZ_BINS := $(patsubst %,$(FUZZ_OUT)/fuzz_%,$(FUZZ_NAMES))
FUZZ_REPLAYS := $(patsubst %,$(OUT)/fuzz/replay_%,$(FUZZ_NAMES))
FUZZ_HEADERS := $(HEADERS) tests/fuzz/fuzz_util.h

DEB_PKGS += libclang-rt-14-dev

$(FUZZ_OUT)/obj/agent/%.o: agent/%.c $(BUILD_MK) | $(OUT)/bpf/verify.bpf.skel.h $(OUT)/bpf/oom.bpf.skel.h
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/obj/common/%.o: common/%.c $(BUILD_MK)
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/obj/symbolizer/%.o: symbolizer/%.c $(HEADERS) $(BUILD_MK)
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/obj/client/%.o: client/%.c $(HEADERS) $(BUILD_MK)
	$(call msg,FUZZCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_OUT)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_AGENT_OBJS) $(FUZZ_CLIENT_OBJS) $(FUZZ_HEADERS)
	$(call msg,FUZZLD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_AGENT_OBJS) \
		$(FUZZ_CLIENT_OBJS) $(LIBS_AGENT)

# The replay builds: the test build's compiler, flags and sanitizers, no libFuzzer.
$(OUT)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(AGENT_COMMON_OBJS) $(CLIENT_OBJS) $(PPROFREAD_OBJS) $(OUT)/obj/symbolizer/symparse.o $(COMMON_LIB) $(FUZZ_HEADERS)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $< tests/fuzz/replay_main.c $(AGENT_COMMON_OBJS) \
		$(CLIENT_OBJS) $(PPROFREAD_OBJS) $(OUT)/obj/symbolizer/symparse.o $(COMMON_LIB) \
		$(LIBS_AGENT)

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
fuzz-seeds: $(AGENT_COMMON_OBJS) $(COMMON_LIB)
	@mkdir -p $(OUT)/fuzz $(addprefix tests/fuzz/corpus/,$(FUZZ_NAMES))
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -O1 -g0 -s -o $(OUT)/fuzz/make_seeds tests/fuzz/make_seeds.c \
		$(AGENT_COMMON_OBJS) $(COMMON_LIB) $(LIBS_AGENT)
	$(Q)printf 'static int sq(int x) { return x * x; }\nint fz_main(int a) { return sq(a) + 1; }\n' | \
		$(CC) -x c -g -O1 -shared -fPIC -nostdlib -Wl,--build-id -o $(OUT)/fuzz/tiny.so -
	$(OUT)/fuzz/make_seeds tests/fuzz/corpus $(OUT)/fuzz/tiny.so
