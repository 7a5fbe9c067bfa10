# client/build.mk: the protocol's client side (client.c, also linked into the tests) and
# llgo-heap, the CLI. The CLI links that, the CLI's own files, common/ and zlib, for the
# gzipped pprof files of `llgo-heap diff`: no agent object, no libdw, libelf, libmicrohttpd,
# libbpf or libunwind (tests/test_e2e.c checks). The pprof reader and the diff (with what they
# use) are linked into the tests and the fuzz harnesses too.
CLIENT_OBJS := $(OUT)/obj/client/client.o
PPROFREAD_OBJS := $(patsubst %,$(OUT)/obj/client/%.o,pprofread diff human)
CLI_OBJS := $(patsubst client/%.c,$(OUT)/obj/client/%.o,$(filter-out client/client.c,\
	$(wildcard client/*.c))) $(CLIENT_OBJS) $(COMMON_LIB)
LIBS_CLI := -lz

$(OUT)/obj/client/%.o: client/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

$(OUT)/bin/llgo-heap: $(CLI_OBJS)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_CLI)
