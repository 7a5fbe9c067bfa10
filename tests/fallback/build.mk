# tests/fallback/build.mk: the size-class fallback recorder on targets without a stack source
# (tests/test_fallback.c).

# shim/fallback/ is freestanding and depends on nothing else here. tests/test_fallback.c runs
# Go's heapsampling check on its text natively, as wasm32-wasi under Node's WASI and on a
# bare-metal Cortex-M3 under qemu-system-arm (semihosting). A target whose compiler or
# runner is missing gets a .skip file with the reason instead of its program, and the test
# reports it as skipped; with the toolchain present, a build failure is an error.

DEB_PKGS += lld wasi-libc libclang-rt-14-dev-wasm32 nodejs gcc-arm-none-eabi qemu-system-arm

FB_OUT := $(OUT)/fallback
FB_SRCS := shim/fallback/llgo_fallback.c tests/fallback/hs.c
FB_DEPS := $(FB_SRCS) shim/fallback/llgo_fallback.h tests/fallback/hs.h $(BUILD_MK)
FB_CFLAGS := -std=c11 -g -O2 -Wall -Wextra -Werror -Wundef -Wstrict-prototypes
WASI_CC ?= clang
CM_CC ?= arm-none-eabi-gcc
CM_CFLAGS := -mcpu=cortex-m3 -mthumb -ffreestanding -nostdlib

.PHONY: fallback-progs test-fallback
fallback-progs: $(FB_OUT)/hs-native $(FB_OUT)/hs.wasm $(FB_OUT)/hs-cortex-m3.elf

$(FB_OUT)/hs-native: $(FB_DEPS) tests/fallback/hosted_main.c
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(FB_CFLAGS) -o $@ $(FB_SRCS) tests/fallback/hosted_main.c

# The probes test the toolchain with an empty program, never with our sources.
$(FB_OUT)/hs.wasm: $(FB_DEPS) tests/fallback/hosted_main.c
	@mkdir -p $(dir $@); rm -f $(FB_OUT)/wasm32-wasi.skip
	$(Q)if ! command -v node >/dev/null; then \
		echo "node (Debian package nodejs) is not installed" > $(FB_OUT)/wasm32-wasi.skip; \
	elif ! echo 'int main(void){return 0;}' | $(WASI_CC) --target=wasm32-wasi -x c - \
		-o $(FB_OUT)/probe.wasm >/dev/null 2>&1; then \
		echo "$(WASI_CC) --target=wasm32-wasi cannot link a program (Debian packages" \
			"clang, lld, wasi-libc, libclang-rt-14-dev-wasm32)" > $(FB_OUT)/wasm32-wasi.skip; \
	else \
		$(if $(filter 1,$(V)),,printf '  %-8s %s\n' CC $@;) \
		$(WASI_CC) --target=wasm32-wasi $(FB_CFLAGS) -o $@ $(FB_SRCS) \
			tests/fallback/hosted_main.c; \
	fi; rm -f $(FB_OUT)/probe.wasm
	@if [ -f $(FB_OUT)/wasm32-wasi.skip ]; then \
		echo "  SKIP     wasm32-wasi: $$(cat $(FB_OUT)/wasm32-wasi.skip)"; fi

$(FB_OUT)/hs-cortex-m3.elf: $(FB_DEPS) tests/fallback/cortexm.c tests/fallback/cortexm.ld
	@mkdir -p $(dir $@); rm -f $(FB_OUT)/cortex-m3.skip
	$(Q)if ! command -v qemu-system-arm >/dev/null; then \
		echo "qemu-system-arm (Debian package qemu-system-arm) is not installed" \
			> $(FB_OUT)/cortex-m3.skip; \
	elif ! echo 'void _start(void){for(;;);}' | $(CM_CC) $(CM_CFLAGS) -x c - \
		-o $(FB_OUT)/probe.elf >/dev/null 2>&1; then \
		echo "$(CM_CC) cannot link for Cortex-M3 (Debian package gcc-arm-none-eabi)" \
			> $(FB_OUT)/cortex-m3.skip; \
	else \
		$(if $(filter 1,$(V)),,printf '  %-8s %s\n' CC $@;) \
		$(CM_CC) $(CM_CFLAGS) $(FB_CFLAGS) -T tests/fallback/cortexm.ld -o $@ $(FB_SRCS) \
			tests/fallback/cortexm.c -lgcc; \
	fi; rm -f $(FB_OUT)/probe.elf
	@if [ -f $(FB_OUT)/cortex-m3.skip ]; then \
		echo "  SKIP     cortex-m3: $$(cat $(FB_OUT)/cortex-m3.skip)"; fi

# The unit test compiles the recorder in (#include) and runs the programs above.
$(OUT)/tests/test_fallback: shim/fallback/llgo_fallback.c shim/fallback/llgo_fallback.h | fallback-progs

test-fallback: deps
	$(Q)$(MAKE) --no-print-directory fallback-progs $(OUT)/tests/test_fallback
	$(OUT)/tests/test_fallback --jobs=2 --timeout=600
