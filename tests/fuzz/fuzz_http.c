// SPDX-License-Identifier: MIT
/*
 * fuzz_http.c: libFuzzer harness for llgo-heapd's HTTP server (http.c behind libmicrohttpd):
 * the input is the request target after /debug/pprof/ (query string included), or, when it
 * starts with 'P', the body of a POST /debug/pprof/symbol. "PID" in the input is replaced by
 * the pid of a process attached to the in-process daemon (this one, as a shim with a control
 * page), so the profile paths are reached. Each answer is read (up to 300 ms) and dropped.
 */
#include <netinet/in.h>
#include <poll.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_port;
static int fz_shim = -1;

static void fz_setup(void)
{
	if (fz_port)
		return;
	fz_daemon_start(true);
	const char *a = http_address(fz_d.http);
	const char *colon = a ? strrchr(a, ':') : NULL;
	fz_port = colon ? atoi(colon + 1) : 0;
	if (!fz_port)
		abort();
	/* this process attaches as a shim (control page only), so pid=PID has a session */
	int fd = fz_memfd(NULL, 0, LLGO_CTL_SIZE, true);
	fz_shim = fz_connect();
	struct llgo_msg_hello m;
	memset(&m, 0, sizeof(m));
	msg_header_init(&m.h, LLGO_MSG_HELLO, sizeof(m));
	m.ring_data_size = LLGO_RING_MIN_DATA;
	m.rate_word = 512;
	m.flags = LLGO_HELLO_NO_ACK;
	snprintf(m.comm, sizeof(m.comm), "fuzz");
	msg_send(fz_shim, &m, sizeof(m), fd);
	close(fd);
	fz_list();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_setup();
	if (size > 8192)
		return 0;
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	struct buf in, req;
	buf_init(&in);
	buf_init(&req);
	for (size_t i = 0; i < size; i++) {
		if (i + 3 <= size && memcmp(data + i, "PID", 3) == 0) {
			buf_puts(&in, pid);
			i += 2;
		} else {
			buf_putc(&in, (char)data[i]);
		}
	}
	if (in.len && in.data[0] == 'P') {
		buf_printf(&req, "POST /debug/pprof/symbol HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
				 "Content-Length: %zu\r\n\r\n", in.len - 1);
		buf_append(&req, in.data + 1, in.len - 1);
	} else {
		buf_puts(&req, "GET /debug/pprof/");
		buf_append(&req, in.data, in.len);
		buf_puts(&req, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	}
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)fz_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s >= 0 && !req.failed && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(s, req.data, req.len) == (ssize_t)req.len) {
		char buf[4096];
		for (int i = 0; i < 64; i++) {
			struct pollfd p = { .fd = s, .events = POLLIN };
			if (poll(&p, 1, 300) <= 0 || read(s, buf, sizeof(buf)) <= 0)
				break;
		}
	}
	if (s >= 0)
		close(s);
	buf_free(&in);
	buf_free(&req);
	return 0;
}
