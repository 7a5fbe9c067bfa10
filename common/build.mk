# common/build.mk: what the daemon, the CLI, the symbolizer and the tests all link, as one
# archive (libcommon.a): buffers, socket message framing (over shared/frame.h, which the shim
# includes itself), the log, escaping, gzip. Nothing in it knows the daemon.

COMMON_SRCS := $(wildcard common/*.c)
COMMON_OBJS := $(patsubst common/%.c,$(OUT)/obj/common/%.o,$(COMMON_SRCS))
COMMON_LIB := $(OUT)/obj/common/libcommon.a

$(OUT)/obj/common/%.o: common/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

$(COMMON_LIB): $(COMMON_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
