# agent/verify/build.mk: the BPF program of llgo-heap verify (verify.bpf.c) and its skeleton.

# vmlinux.h comes from the running kernel's BTF (bpftool btf dump). Where the build machine
# has no /sys/kernel/btf/vmlinux, the program is built against the kernel's UAPI headers
# instead (agent/verify/verify_nobtf.h): it reads only pt_regs, whose layout is UAPI.
BTF_VMLINUX ?= /sys/kernel/btf/vmlinux
$(OUT)/bpf/vmlinux.h:
	@mkdir -p $(dir $@)
	$(Q)if [ -r $(BTF_VMLINUX) ]; then \
		echo "  BTF      $@ (generated from $(BTF_VMLINUX))"; \
		bpftool btf dump file $(BTF_VMLINUX) format c > $@.tmp && mv $@.tmp $@; \
	else \
		echo "  BTF      $(BTF_VMLINUX) missing: verify.bpf.c builds against UAPI headers (agent/verify/verify_nobtf.h)"; \
		cp agent/verify/verify_nobtf.h $@; \
	fi

$(OUT)/bpf/verify.bpf.o: agent/verify/verify.bpf.c shared/verify.h $(OUT)/bpf/vmlinux.h $(BUILD_MK)
	$(call msg,BPF,$@)
	$(Q)clang $(BPF_CFLAGS) -c $< -o $@.tmp && llvm-strip -g $@.tmp -o $@ && rm -f $@.tmp

$(OUT)/bpf/verify.bpf.skel.h: $(OUT)/bpf/verify.bpf.o
	$(call msg,SKEL,$@)
	$(Q)bpftool gen skeleton $< name verify_bpf > $@.tmp && mv $@.tmp $@

$(OUT)/obj/agent/verify/verify.o: $(OUT)/bpf/verify.bpf.skel.h
$(OUT)/obj/agent/verify/verify.o: CFLAGS_AGENT += -I$(OUT)/bpf
