/* SPDX-License-Identifier: MIT */
/*
 * fuzz_util.h: an in-process llgo-heapd (server.c on a private socket, optionally --http
 * on 127.0.0.1) for the harnesses that fuzz its socket and its HTTP server, and the
 * requests they make to it (through client/client.c).
 */
#ifndef LLGO_FUZZ_UTIL_H
#define LLGO_FUZZ_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../agent/http/http.h"
#include "../../agent/ingest/session.h"
#include "../../client/client.h"

struct fz_daemon {
	struct server *srv;
	struct http_server *http;
	char dir[64];
	char sock[100];
};

__attribute__((unused)) static struct fz_daemon fz_d;

__attribute__((unused)) static void fz_daemon_start(bool http)
{
	if (fz_d.srv)
		return;
	log_use_syslog(true); /* quiet: stderr is for the sanitizers */
	snprintf(fz_d.dir, sizeof(fz_d.dir), "/tmp/llgo-fuzz.XXXXXX");
	if (!mkdtemp(fz_d.dir))
		abort();
	snprintf(fz_d.sock, sizeof(fz_d.sock), "%s/heapd.sock", fz_d.dir);
	struct server_opts o;
	memset(&o, 0, sizeof(o));
	o.socket_path = fz_d.sock;
	o.keep_exited = 16;
	char err[256];
	fz_d.srv = server_new(&o, err, sizeof(err));
	if (!fz_d.srv) {
		fprintf(stderr, "fuzz: server_new: %s\n", err);
		abort();
	}
	if (http) {
		fz_d.http = http_new(fz_d.srv, "127.0.0.1:0", NULL, 0, err, sizeof(err));
		if (!fz_d.http || http_start(fz_d.http, err, sizeof(err)) != 0) {
			fprintf(stderr, "fuzz: http: %s\n", err);
			abort();
		}
	}
	if (server_start(fz_d.srv) != 0)
		abort();
}

/* The protocol is client/client.c's, as for the CLI and the tests. */
#define FZ_TIMEOUT_MS 5000u

__attribute__((unused)) static int fz_connect(void)
{
	int s;
	return client_connect(fz_d.sock, FZ_TIMEOUT_MS, &s) == 0 ? s : -1;
}

/* Send req on a new connection and read until END (or the connection drops). */
__attribute__((unused)) static void fz_request(const void *req, size_t n)
{
	struct client_answer a;
	client_request(fz_d.sock, req, n, FZ_TIMEOUT_MS, &a);
	client_answer_free(&a);
}

__attribute__((unused)) static void fz_list(void)
{
	struct llgo_msg_header h;
	client_list_req(&h);
	fz_request(&h, sizeof(h));
}

__attribute__((unused)) static void fz_snapshot(int fmt)
{
	struct llgo_msg_snapshot m;
	client_snapshot_req(&m, getpid(), (uint32_t)fmt, 0, 0);
	fz_request(&m, sizeof(m));
}

/* A process memfd of len bytes (at least the control page) holding data, sealable. */
__attribute__((unused)) static int fz_memfd(const uint8_t *data, size_t n, size_t len, bool fix_ctl)
{
	int fd = memfd_create("llgo-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len) != 0 || (n && pwrite(fd, data, n < len ? n : len, 0) < 0)) {
		close(fd);
		return -1;
	}
	if (fix_ctl && len >= LLGO_CTL_SIZE) {
		struct llgo_ctl c;
		if (pread(fd, &c, sizeof(c), 0) == (ssize_t)sizeof(c)) {
			c.magic = LLGO_CTL_MAGIC;
			c.version = LLGO_CTL_VERSION;
			c.size = LLGO_CTL_SIZE;
			c.page_size = 4096;
			if (pwrite(fd, &c, sizeof(c), 0) != (ssize_t)sizeof(c)) {
				close(fd);
				return -1;
			}
		}
	}
	return fd;
}

#endif
