# tests/progs/build.mk: the programs the end-to-end tests profile (tests/progs/), and those
# that link the shim instead of preloading it (tests/test_linked.c).

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

# Programs profiled by the end-to-end tests: plain, frame pointers on, never sanitized.
PROG_CFLAGS := -std=gnu11 -g -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -pthread
$(OUT)/progs/%: tests/progs/%.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(PROG_CFLAGS) -o $@ $< -ldl -lm

$(OUT)/progs/libllgoheap-noprobe.so: $(SHIM_SRCS) $(HEADERS) shim/libllgoheap.map $(BUILD_MK)
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
