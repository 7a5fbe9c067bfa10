// SPDX-License-Identifier: MIT
/*
 * sym_deleted.c: a program for test_symbolize's deleted-binary case. It prints one line,
 * "pid <pid> addr <return address> line <line>", where the address is a return address
 * inside sym_prog_caller (at the call on <line>), then waits until its stdin closes, so
 * the test can delete the executable and symbolize the address through /proc/<pid>.
 */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static int call_line;

__attribute__((noinline)) uintptr_t sym_prog_leaf(void)
{
	uintptr_t r = (uintptr_t)__builtin_return_address(0);
	__asm__ volatile("" : : "r"(r) : "memory");
	return r;
}

__attribute__((noinline)) uintptr_t sym_prog_caller(void)
{
	uintptr_t r = sym_prog_leaf(); call_line = __LINE__;
	__asm__ volatile("" : : "r"(r) : "memory");
	return r;
}

int main(void)
{
	uintptr_t a = sym_prog_caller();
	printf("pid %d addr 0x%lx line %d\n", (int)getpid(), (unsigned long)a, call_line);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
