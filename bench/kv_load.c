// SPDX-License-Identifier: MIT
/*
 * kv_load.c: a bounded memcached load for `make bench-services`. CONNS connections, one
 * thread each, send text-protocol get and set requests back to back (one outstanding request
 * per connection, as memtier's default pipeline of 1) for SECONDS, and every request's
 * latency is kept, so the p99 is exact rather than read off a histogram. The keys are set
 * once before the clock starts, so every get hits.
 *
 *   kv_load --port P [--conns 50] [--seconds 10] [--keys 10000] [--value 100] [--set-every 10]
 *
 * Prints one line: "ops=N seconds=S ops_per_sec=X p50_us=A p99_us=B errors=E". Exit 1 when the
 * server cannot be reached or a connection fails. It leaves the server, its start and its stop
 * to bench/services.sh.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct kv_conn {
	pthread_t thread;
	int fd;
	unsigned seed;
	uint32_t *lat_ns; /* one entry per completed request, capped at 4.29 s */
	size_t n, cap;
	uint64_t errors;
};

static int g_port;
static unsigned g_conns = 50, g_seconds = 10, g_keys = 10000, g_value = 100, g_set_every = 10;
static int64_t g_deadline_ns;

static int64_t kv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int kv_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool kv_send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Reads until the buffer ends with the reply's terminator ("END\r\n" for get, "\r\n" for set). */
static bool kv_read_reply(int fd, char *buf, size_t cap, const char *end)
{
	size_t n = 0, el = strlen(end);
	for (;;) {
		ssize_t r = recv(fd, buf + n, cap - n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		n += (size_t)r;
		if (n >= el && memcmp(buf + n - el, end, el) == 0)
			return true;
		if (n == cap)
			return false;
	}
}

static bool kv_request(struct kv_conn *c, bool set, unsigned key, const char *value, char *buf,
		       size_t cap)
{
	int len;
	if (set)
		len = snprintf(buf, cap, "set key:%u 0 0 %u\r\n%s\r\n", key, g_value, value);
	else
		len = snprintf(buf, cap, "get key:%u\r\n", key);
	if (len < 0 || (size_t)len >= cap || !kv_send_all(c->fd, buf, (size_t)len))
		return false;
	if (!kv_read_reply(c->fd, buf, cap, set ? "\r\n" : "END\r\n"))
		return false;
	return !set || strncmp(buf, "STORED", 6) == 0;
}

static void *kv_run(void *arg)
{
	struct kv_conn *c = arg;
	size_t cap = (size_t)g_value + 256;
	char *buf = malloc(cap), *value = malloc((size_t)g_value + 1);
	if (!buf || !value)
		return NULL;
	memset(value, 'v', g_value);
	value[g_value] = 0;
	for (uint64_t i = 0;; i++) {
		int64_t t0 = kv_now_ns();
		if (t0 >= g_deadline_ns)
			break;
		bool set = g_set_every && i % g_set_every == 0;
		unsigned key = (unsigned)rand_r(&c->seed) % g_keys;
		if (!kv_request(c, set, key, value, buf, cap)) {
			c->errors++;
			break;
		}
		int64_t dt = kv_now_ns() - t0;
		if (c->n == c->cap) {
			size_t ncap = c->cap ? c->cap * 2 : 65536;
			uint32_t *nl = realloc(c->lat_ns, ncap * sizeof(*nl));
			if (!nl)
				break;
			c->lat_ns = nl;
			c->cap = ncap;
		}
		c->lat_ns[c->n++] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
	}
	free(buf);
	free(value);
	return NULL;
}

static int kv_cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

static bool kv_preload(void)
{
	struct kv_conn c = { .fd = kv_connect() };
	if (c.fd < 0)
		return false;
	size_t cap = (size_t)g_value + 256;
	char *buf = malloc(cap), *value = malloc((size_t)g_value + 1);
	bool ok = buf && value;
	if (ok) {
		memset(value, 'v', g_value);
		value[g_value] = 0;
	}
	for (unsigned k = 0; ok && k < g_keys; k++)
		ok = kv_request(&c, true, k, value, buf, cap);
	free(buf);
	free(value);
	close(c.fd);
	return ok;
}

static unsigned kv_arg(const char *s, unsigned min)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || v < min || v > 1000000) {
		fprintf(stderr, "kv_load: bad number '%s'\n", s);
		exit(2);
	}
	return (unsigned)v;
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			g_port = (int)kv_arg(argv[i + 1], 1);
		else if (!strcmp(argv[i], "--conns"))
			g_conns = kv_arg(argv[i + 1], 1);
		else if (!strcmp(argv[i], "--seconds"))
			g_seconds = kv_arg(argv[i + 1], 1);
		else if (!strcmp(argv[i], "--keys"))
			g_keys = kv_arg(argv[i + 1], 1);
		else if (!strcmp(argv[i], "--value"))
			g_value = kv_arg(argv[i + 1], 1);
		else if (!strcmp(argv[i], "--set-every"))
			g_set_every = kv_arg(argv[i + 1], 0);
		else {
			fprintf(stderr, "kv_load: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (g_port <= 0 || g_port > 65535) {
		fprintf(stderr, "usage: kv_load --port P [--conns N] [--seconds S] [--keys K] "
				"[--value BYTES] [--set-every N]\n");
		return 2;
	}
	if (!kv_preload()) {
		fprintf(stderr, "kv_load: cannot load keys into 127.0.0.1:%d\n", g_port);
		return 1;
	}
	struct kv_conn *conns = calloc(g_conns, sizeof(*conns));
	if (!conns)
		return 1;
	for (unsigned i = 0; i < g_conns; i++) {
		conns[i].seed = i * 7919 + 1;
		if ((conns[i].fd = kv_connect()) < 0) {
			fprintf(stderr, "kv_load: connect: %s\n", strerror(errno));
			return 1;
		}
	}
	int64_t start = kv_now_ns();
	g_deadline_ns = start + (int64_t)g_seconds * 1000000000;
	for (unsigned i = 0; i < g_conns; i++)
		if (pthread_create(&conns[i].thread, NULL, kv_run, &conns[i]) != 0)
			return 1;
	size_t total = 0;
	uint64_t errors = 0;
	for (unsigned i = 0; i < g_conns; i++) {
		pthread_join(conns[i].thread, NULL);
		total += conns[i].n;
		errors += conns[i].errors;
	}
	double secs = (double)(kv_now_ns() - start) / 1e9;
	uint32_t *all = malloc((total ? total : 1) * sizeof(*all));
	if (!all)
		return 1;
	size_t k = 0;
	for (unsigned i = 0; i < g_conns; i++) {
		memcpy(all + k, conns[i].lat_ns, conns[i].n * sizeof(*all));
		k += conns[i].n;
		close(conns[i].fd);
		free(conns[i].lat_ns);
	}
	qsort(all, total, sizeof(*all), kv_cmp);
	double p50 = total ? all[total / 2] / 1e3 : 0, p99 = total ? all[total * 99 / 100] / 1e3 : 0;
	printf("ops=%zu seconds=%.2f ops_per_sec=%.0f p50_us=%.1f p99_us=%.1f errors=%llu\n", total,
	       secs, total / secs, p50, p99, (unsigned long long)errors);
	free(all);
	free(conns);
	return errors ? 1 : 0;
}
