// SPDX-License-Identifier: MIT
/*
 * demo.c: the sample program `make demo` profiles. A toy request handler that parses,
 * caches and logs, so the profile has a few distinct allocation sites of different weight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	char *key;
	char *value;
	struct entry *next;
};

static struct entry *cache[1024];

/* Keep the compiler from eliding a malloc/free pair whose memory is never read. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static char *parse_request(int i)
{
	char *buf = malloc(256);
	snprintf(buf, 256, "GET /item/%d HTTP/1.1", i);
	return buf;
}

__attribute__((noinline)) static void cache_store(const char *key, size_t value_len)
{
	struct entry *e = malloc(sizeof(*e));
	e->key = strdup(key);
	e->value = calloc(1, value_len);
	unsigned h = 0;
	for (const char *p = key; *p; p++)
		h = h * 31 + (unsigned char)*p;
	e->next = cache[h % 1024];
	cache[h % 1024] = e;
}

__attribute__((noinline)) static void log_line(int i)
{
	char *line = malloc(64 + (size_t)(i % 64));
	snprintf(line, 64, "served %d", i);
	KEEP(line);
	free(line);
}

__attribute__((noinline)) static void render_page(int i)
{
	size_t n = 4096 + (size_t)(i % 8) * 1024;
	char *page = malloc(n);
	memset(page, 'x', n);
	KEEP(page);
	free(page);
}

int main(void)
{
	size_t kept = 0;
	for (int i = 0; i < 200000; i++) {
		char *req = parse_request(i);
		if (i % 4 == 0) {
			cache_store(req, 512);
			kept++;
		}
		render_page(i);
		log_line(i);
		free(req);
	}
	printf("demo: served 200000 requests, cached %zu entries\n", kept);
	return 0;
}
