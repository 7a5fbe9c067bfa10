# agent/dump/build.mk: the BPF program of the OOM watch (oom.bpf.c) and its skeleton.

# The OOM watch (agent/dump/oom.bpf.c, --dump-oom): CO-RE against a local definition of the
# task_struct fields it reads, so it needs no vmlinux.h; the kernel's BTF is needed at run
# time (agent/dump/oom.c falls back to the cgroups' counters without it).
$(OUT)/bpf/oom.bpf.o: agent/dump/oom.bpf.c shared/oom.h $(BUILD_MK)
	$(call msg,BPF,$@)
	@mkdir -p $(dir $@)
	$(Q)clang $(BPF_CFLAGS) -c $< -o $@.tmp && llvm-strip -g $@.tmp -o $@ && rm -f $@.tmp

$(OUT)/bpf/oom.bpf.skel.h: $(OUT)/bpf/oom.bpf.o
	$(call msg,SKEL,$@)
	$(Q)bpftool gen skeleton $< name oom_skel > $@.tmp && mv $@.tmp $@

$(OUT)/obj/agent/dump/oom.o: $(OUT)/bpf/oom.bpf.skel.h
$(OUT)/obj/agent/dump/oom.o: CFLAGS_AGENT += -I$(OUT)/bpf
