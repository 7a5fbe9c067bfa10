// SPDX-License-Identifier: MIT
/*
 * cortexm.c: hs.c's glue on a bare-metal Cortex-M3 (QEMU's lm3s6965evb: 256 KiB flash at 0,
 * 64 KiB RAM at 0x20000000), with no C library at all: the vector table and reset handler,
 * .data/.bss set-up, the four functions freestanding C requires (memset, memcpy, memmove,
 * memcmp), a stack-order arena as the allocator underneath, and ARM semihosting (BKPT 0xAB)
 * for the arguments (SYS_GET_CMDLINE: qemu's -semihosting-config arg=...), the output
 * (SYS_WRITE to ":tt") and the exit status (SYS_EXIT: qemu exits 0 for ApplicationExit, 1
 * otherwise).
 */
#include "hs.h"

#define SYS_OPEN 0x01
#define SYS_WRITE 0x05
#define SYS_GET_CMDLINE 0x15
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define ADP_STOPPED_RUNTIME_ERROR 0x20023

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];

static int cm_semihost(int op, const void *arg)
{
	register int r0 __asm__("r0") = op;
	register const void *r1 __asm__("r1") = arg;
	__asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
	return r0;
}

/* ---- what freestanding C requires of the environment --------------------------------- */

void *memset(void *d, int c, size_t n);
void *memcpy(void *restrict d, const void *restrict s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);

/* The compiler recognises these loops as the functions themselves: keep them loops. */
#define CM_NOBUILTIN __attribute__((optimize("no-tree-loop-distribute-patterns")))

CM_NOBUILTIN void *memset(void *d, int c, size_t n)
{
	unsigned char *p = d;
	while (n--)
		*p++ = (unsigned char)c;
	return d;
}

CM_NOBUILTIN void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
	unsigned char *p = d;
	const unsigned char *q = s;
	while (n--)
		*p++ = *q++;
	return d;
}

CM_NOBUILTIN void *memmove(void *d, const void *s, size_t n)
{
	unsigned char *p = d;
	const unsigned char *q = s;
	if (p < q) {
		while (n--)
			*p++ = *q++;
	} else {
		while (n--)
			p[n] = q[n];
	}
	return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *p = a, *q = b;
	for (; n; n--, p++, q++)
		if (*p != *q)
			return *p < *q ? -1 : 1;
	return 0;
}

/* ---- the allocator underneath: an arena freed in stack order --------------------------- */

#define CM_ARENA_SIZE (24u * 1024u)
static unsigned char cm_arena[CM_ARENA_SIZE] __attribute__((aligned(16)));
static size_t cm_top;

void *hs_raw_alloc(size_t size)
{
	size = (size + 15u) & ~(size_t)15u;
	if (size > CM_ARENA_SIZE - cm_top - 16u)
		return 0;
	unsigned char *p = cm_arena + cm_top;
	*(size_t *)p = size; /* the previous top, kept in front of the block */
	cm_top += 16u + size;
	return p + 16u;
}

void hs_raw_free(void *v)
{
	unsigned char *p = (unsigned char *)v - 16u;
	size_t size = *(size_t *)p;
	if (p + 16u + size == cm_arena + cm_top) /* the last block: give it back */
		cm_top = (size_t)(p - cm_arena);
}

/* ---- semihosting I/O -------------------------------------------------------------------- */

static int cm_stdout = -1;

int hs_write(void *ctx, const char *s, size_t n)
{
	(void)ctx;
	if (cm_stdout < 0) {
		uint32_t blk[3] = { (uint32_t)":tt", 4 /* "w" */, 3 };
		cm_stdout = cm_semihost(SYS_OPEN, blk);
		if (cm_stdout < 0)
			return 1;
	}
	uint32_t blk[3] = { (uint32_t)cm_stdout, (uint32_t)s, (uint32_t)n };
	return cm_semihost(SYS_WRITE, blk) != 0; /* returns the bytes NOT written */
}

static char cm_cmdline[256];

/* Split the semihosting command line at spaces into argv. */
static int cm_args(char **argv, int max)
{
	uint32_t blk[2] = { (uint32_t)cm_cmdline, sizeof(cm_cmdline) - 1 };
	if (cm_semihost(SYS_GET_CMDLINE, blk) != 0)
		return 0;
	int argc = 0;
	char *p = cm_cmdline;
	while (*p && argc < max) {
		while (*p == ' ')
			*p++ = '\0';
		if (!*p)
			break;
		argv[argc++] = p;
		while (*p && *p != ' ')
			p++;
	}
	return argc;
}

/* ---- start ------------------------------------------------------------------------------ */

void cm_reset(void);

__attribute__((section(".vectors"), used)) static const void *const cm_vectors[] = {
	_estack, /* initial stack pointer */
	(const void *)cm_reset,
};

__attribute__((noreturn)) void cm_reset(void)
{
	for (uint32_t *s = _sidata, *d = _sdata; d < _edata;)
		*d++ = *s++;
	for (uint32_t *d = _sbss; d < _ebss;)
		*d++ = 0;
	char *argv[8];
	int argc = cm_args(argv, 8);
	int rc = hs_main(argc, argv);
	cm_semihost(SYS_EXIT,
		    (const void *)(uintptr_t)(rc == 0 ? ADP_STOPPED_APPLICATION_EXIT
						      : ADP_STOPPED_RUNTIME_ERROR));
	for (;;)
		;
}
