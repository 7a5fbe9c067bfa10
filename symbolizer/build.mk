# symbolizer/build.mk: llgo-heap-symbolizer, the sandboxed process that parses ELF/DWARF files
# for the daemon (one per profiled uid, agent/symbol/symhelper.c), and its build with test
# hooks. libdw/libelf and common/ only, no agent objects.
SYMBOLIZER_SRCS := $(wildcard symbolizer/*.c)
SYMBOLIZER_OBJS := $(patsubst symbolizer/%.c,$(OUT)/obj/symbolizer/%.o,$(SYMBOLIZER_SRCS))
LIBS_SYMBOLIZER := -ldw -lelf -lz

$(OUT)/obj/symbolizer/%.o: symbolizer/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

$(OUT)/bin/llgo-heap-symbolizer: $(SYMBOLIZER_OBJS) $(COMMON_LIB)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_SYMBOLIZER)

# The same with test hooks (symbolizer/symserver.c: a function named sandbox_test_crash
# aborts it, sandbox_test_hang hangs it): tests/test_sandbox.c only, never installed.
$(OUT)/tests/llgo-heap-symbolizer-hooks: $(SYMBOLIZER_SRCS) $(COMMON_LIB) $(HEADERS) $(BUILD_MK)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -DSYMSERVER_TEST_HOOKS -o $@ $(SYMBOLIZER_SRCS) $(COMMON_LIB) \
		$(LIBS_SYMBOLIZER)
