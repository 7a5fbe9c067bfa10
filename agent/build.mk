# agent/build.mk: llgo-heapd: every source of agent/*/ (agent/server/daemon.c holds main) and
# its BPF programs (agent/verify/build.mk, agent/dump/build.mk).

LIBS_AGENT := -lbpf -lelf -ldw -ldebuginfod -lz -lmicrohttpd -lcurl -lunwind-x86_64 -lunwind -lpthread -lm

AGENT_COMMON_SRCS := $(filter-out agent/server/daemon.c %.bpf.c,$(wildcard agent/*/*.c))
AGENT_COMMON_OBJS := $(patsubst agent/%.c,$(OUT)/obj/agent/%.o,$(AGENT_COMMON_SRCS))

$(OUT)/obj/agent/%.o: agent/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) $(DEPFLAGS) -c $< -o $@

# The BPF programs (agent/verify/build.mk, agent/dump/build.mk), built with clang.
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror \
	-I$(OUT)/bpf -I/usr/include/$(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

include agent/verify/build.mk
include agent/dump/build.mk

$(OUT)/bin/llgo-heapd: $(OUT)/obj/agent/server/daemon.o $(AGENT_COMMON_OBJS) $(COMMON_LIB)
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_AGENT) -o $@ $^ $(LIBS_AGENT)
