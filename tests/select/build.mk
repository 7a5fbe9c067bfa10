# tests/select/build.mk: the selection and zero-cost proofs' programs (tests/test_select.c).

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
