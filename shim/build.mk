# shim/build.mk: the in-process sampler: libllgoheap.so (LD_PRELOAD), libllgoheap.a (linked
# into a program), libllgoheap-static.a (fully static programs) and their pkg-config files.

# The shim: no sanitizers ever, hidden by default, initial-exec TLS, no builtin malloc folding.
# SHIM_EXTRA_CFLAGS: include paths a cross build adds (the arm64 build's <sys/sdt.h>).
SHIM_EXTRA_CFLAGS ?=
CFLAGS_SHIM := $(SHIM_EXTRA_CFLAGS) $(BASE_CFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec \
	-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
	-fno-stack-protector -pthread

SHIM_SRCS := $(wildcard shim/*.c)
SHIM_OBJS := $(patsubst shim/%.c,$(OUT)/obj/shim/%.o,$(SHIM_SRCS))
# The sampler without interposition: the hook API, for fully static executables (with
# shim/static/wrap.c) and the unit tests.
SHIM_LIB_OBJS := $(filter-out $(OUT)/obj/shim/override%.o,$(SHIM_OBJS))
# libllgoheap.a: the sampler and the malloc family and C++ operators of libllgoheap.so, so that
# a dynamic executable that links it is profiled as under LD_PRELOAD. Not the lifecycle
# wrappers (override_thread.c: pthread_create, prctl, syscall, _exit), whose definitions in a
# -static link would keep libc.a's own out of it with no next definition to call.
SHIM_ARCHIVE_OBJS := $(filter-out $(OUT)/obj/shim/override_thread.o,$(SHIM_OBJS))

OBJCOPY ?= objcopy
NM ?= nm

# The C++ operators: exceptions thrown by a new_handler or by libstdc++'s operator new unwind
# through their frames (unwind tables whatever the compiler's default); their fast path calls
# the real malloc without a frame pointer, as libstdc++'s does (the functions that need a frame
# force one, see override_cxx.c).
$(OUT)/obj/shim/override_cxx.o: CFLAGS_SHIM += -fasynchronous-unwind-tables -fomit-frame-pointer

$(OUT)/obj/shim/%.o: shim/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_SHIM) $(DEPFLAGS) -c $< -o $@

# The shim without OpenTelemetry's otel_memory probes (LLGO_HEAP_BENCH_NO_OTEL): the baseline
# of their cost while nothing is attached (make bench, bench-otel).
SHIM_NOOTEL_OBJS := $(patsubst shim/%.c,$(OUT)/obj/shim-nootel/%.o,$(SHIM_SRCS))
$(OUT)/obj/shim-nootel/override_cxx.o: CFLAGS_SHIM += -fasynchronous-unwind-tables -fomit-frame-pointer
$(OUT)/obj/shim-nootel/%.o: shim/%.c $(BUILD_MK)
	$(call msg,CC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_SHIM) -DLLGO_HEAP_BENCH_NO_OTEL $(DEPFLAGS) -c $< -o $@

$(OUT)/bench/libllgoheap-nootel.so: $(SHIM_NOOTEL_OBJS) shim/libllgoheap.map
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared -o $@ $(SHIM_NOOTEL_OBJS) -Wl,--version-script=shim/libllgoheap.map \
		-Wl,-z,now -Wl,-z,relro -Wl,--sort-section=alignment -ldl -pthread

$(OUT)/lib/libllgoheap.so: $(SHIM_OBJS) shim/libllgoheap.map
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) -shared -o $@ $(SHIM_OBJS) -Wl,--version-script=shim/libllgoheap.map \
		-Wl,-z,now -Wl,-z,relro -Wl,--sort-section=alignment -ldl -pthread

# The shim's code in the archives goes to its own section, llgo_heap_text: the linker then
# defines __start_/__stop_llgo_heap_text, the exact range stack.c trims, whichever program or
# library the archive is linked into (not that whole object).
SHIM_TEXT_RENAME := $(foreach t,.text .text.unlikely .text.hot .text.startup .text.exit,\
	--rename-section $(t)=llgo_heap_text,alloc,load,readonly,code,contents)

# One relocatable object with every hidden symbol made local, so the archive adds only the
# llgo_heap_* API and the allocation functions to a program's namespace (no clash with a
# user's emit_init or stack_init). One object: a program that references any of its symbols
# (malloc, as every program does, or the hook) gets all of it, constructor included. The
# allocation functions (the names libllgoheap.map exports, but the API, that the object
# defines: an undefined reference made weak, such as prctl's, would stay unresolved in a
# -static link) are weak: a program that defines its own malloc or operator new keeps it,
# and in a -static link libc.a's win.
$(OUT)/obj/shim/libllgoheap-weak.txt: shim/libllgoheap.map $(BUILD_MK)
	@mkdir -p $(dir $@)
	$(Q)sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\);$$/\1/p' $< | grep -v '^llgo_heap_' > $@

$(OUT)/lib/libllgoheap.a: $(SHIM_ARCHIVE_OBJS) $(OUT)/obj/shim/libllgoheap-weak.txt
	$(call msg,AR,$@)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ $(OUT)/obj/shim/libllgoheap-all.o && \
		$(LD) -r -o $(OUT)/obj/shim/libllgoheap-all.o $(SHIM_ARCHIVE_OBJS) && \
		{ $(NM) -g --defined-only $(OUT)/obj/shim/libllgoheap-all.o | awk '{print $$3}' | \
			grep -xF -f $(OUT)/obj/shim/libllgoheap-weak.txt || true; } \
			> $(OUT)/obj/shim/libllgoheap-all.weak && \
		$(OBJCOPY) --localize-hidden $(SHIM_TEXT_RENAME) \
			--weaken-symbols=$(OUT)/obj/shim/libllgoheap-all.weak \
			$(OUT)/obj/shim/libllgoheap-all.o && \
		ar rcs $@ $(OUT)/obj/shim/libllgoheap-all.o

# ---- linked shim: -lllgoheap, fully static executables, pkg-config (issue 14) -------------
# A program links libllgoheap.so (-lllgoheap: its malloc precedes libc's in the lookup order,
# as with LD_PRELOAD) or, fully static (glibc static), libllgoheap-static.a with the linker's
# --wrap for each allocation function (shim/static/wrap.c). The pkg-config files say how:
#   cc prog.c $(pkg-config --cflags --libs llgoheap)                   dynamic
#   cc -static prog.c $(pkg-config --cflags --libs llgoheap-static)    fully static
#   cc -DLLGO_HEAP_PROFILING alloc.c $(pkg-config --cflags --libs --static llgoheap)
#                                                  the hook (and malloc) from libllgoheap.a
# build/lib/pkgconfig/ points into this tree; make install writes copies for $(PREFIX).

LLGO_HEAP_VERSION := 0.1.0
STATIC_WRAP := malloc calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc \
	pvalloc
STATIC_WRAP_FLAGS := -Wl,$(subst $(eval) ,$(comma),$(patsubst %,--wrap=%,$(STATIC_WRAP)))
PC_DIR := $(OUT)/lib/pkgconfig
PC_FILES := $(PC_DIR)/llgoheap.pc $(PC_DIR)/llgoheap-static.pc

all: $(OUT)/lib/libllgoheap-static.a $(PC_FILES)

$(OUT)/lib/libllgoheap-static.a: $(SHIM_LIB_OBJS) $(OUT)/obj/shim/static/wrap.o
	$(call msg,AR,$@)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ $(OUT)/obj/shim/libllgoheap-static-all.o && \
		$(LD) -r -o $(OUT)/obj/shim/libllgoheap-static-all.o $^ && \
		$(OBJCOPY) --localize-hidden $(SHIM_TEXT_RENAME) $(OUT)/obj/shim/libllgoheap-static-all.o && \
		ar rcs $@ $(OUT)/obj/shim/libllgoheap-static-all.o

# pc_write(file, prefix, libdir, includedir)
define pc_write
	@mkdir -p $(dir $(1))
	@printf '%s\n' 'prefix=$(2)' 'libdir=$(3)' 'includedir=$(4)' '' \
		'Name: llgoheap' \
		'Description: llgo-heap in-process sampler: malloc interposition and allocation hook' \
		'Version: $(LLGO_HEAP_VERSION)' \
		'Cflags: -I$${includedir}' \
		'Libs: -L$${libdir} -lllgoheap' \
		'Libs.private: -ldl -pthread' > $(1)
	@printf '%s\n' 'prefix=$(2)' 'libdir=$(3)' 'includedir=$(4)' '' \
		'Name: llgoheap-static' \
		'Description: llgo-heap in-process sampler for fully static executables (link with -static)' \
		'Version: $(LLGO_HEAP_VERSION)' \
		'Cflags: -I$${includedir}' \
		'Libs: $(STATIC_WRAP_FLAGS) $${libdir}/libllgoheap-static.a -pthread' > $(dir $(1))llgoheap-static.pc
endef

$(PC_FILES) &: $(BUILD_MK)
	$(call msg,GEN,$(PC_FILES))
	$(call pc_write,$(PC_DIR)/llgoheap.pc,$(abspath $(OUT)),$${prefix}/lib,$(CURDIR)/include)

# make install also installs the static library, the pkg-config files (for $(PREFIX)) and
# the fallback recorder's sources, which a wasm or bare-metal runtime compiles in.
install: install-linked
uninstall: uninstall-linked
.PHONY: uninstall-linked
uninstall-linked:
	rm -f $(DESTDIR)$(PREFIX)/lib/libllgoheap-static.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap.pc \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap-static.pc \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.h \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.c
	rmdir $(DESTDIR)$(PREFIX)/share/llgo-heap/fallback $(DESTDIR)$(PREFIX)/share/llgo-heap \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig 2>/dev/null || true
install-linked: all
	install -D -m 644 $(OUT)/lib/libllgoheap-static.a $(DESTDIR)$(PREFIX)/lib/libllgoheap-static.a
	$(call pc_write,$(DESTDIR)$(PREFIX)/lib/pkgconfig/llgoheap.pc,$(PREFIX),$${prefix}/lib,$${prefix}/include)
	install -D -m 644 shim/fallback/llgo_fallback.h \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.h
	install -D -m 644 shim/fallback/llgo_fallback.c \
		$(DESTDIR)$(PREFIX)/share/llgo-heap/fallback/llgo_fallback.c
