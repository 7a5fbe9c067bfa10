// SPDX-License-Identifier: MIT
/*
 * cli_io.c: the CLI's requests to llgo-heapd and where their answers go: one request over
 * client.c with every failure turned into one line on stderr (exit status 2), the LIST and
 * SNAPSHOT requests, and writing an answer to a file or stdout.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"

static int cli_io_error(const char *path, int err)
{
	if (err == -ENOENT || err == -ECONNREFUSED)
		return cli_die("no llgo-heapd at %s (start it, or pass --socket PATH)", path);
	if (err == -EACCES)
		return cli_die("cannot connect to %s: permission denied", path);
	if (err == -ETIMEDOUT)
		return cli_die("llgo-heapd at %s did not answer within %u s (stopped or "
			       "overloaded?; --timeout SECONDS)",
			       path, cli_timeout_s + cli_wait_extra_s);
	return cli_die("talking to llgo-heapd at %s: %s", path, strerror(-err));
}

int cli_io_call(const char *path, const void *req, size_t n, struct buf *out, char *message,
		size_t mlen)
{
	struct client_answer a;
	int err = client_request(path, req, n, (cli_timeout_s + cli_wait_extra_s) * 1000u, &a);
	snprintf(message, mlen, "%s", err ? "" : a.message);
	if (!err && !out->data) { /* the usual case: out is new, it takes the answer */
		*out = a.data;
		buf_init(&a.data);
	} else if (!err && buf_append(out, a.data.data, a.data.len) != 0) {
		err = -ENOMEM;
	}
	int status = a.status;
	client_answer_free(&a);
	if (err)
		return cli_io_error(path, err);
	if (status)
		return cli_die("%s", message[0] ? message : strerror(status));
	if (out->failed)
		return cli_die("out of memory");
	return 0;
}

int cli_io_snapshot(const char *path, pid_t pid, int fmt, uint32_t flags, uint32_t top_n,
		    struct buf *out)
{
	struct llgo_msg_snapshot req;
	client_snapshot_req(&req, pid, (uint32_t)fmt, flags, top_n);
	char message[LLGO_END_MSG_LEN];
	return cli_io_call(path, &req, sizeof(req), out, message, sizeof(message));
}

int cli_io_list(const char *path, struct buf *out)
{
	struct llgo_msg_header req;
	client_list_req(&req);
	char message[LLGO_END_MSG_LEN];
	int rc = cli_io_call(path, &req, sizeof(req), out, message, sizeof(message));
	if (!rc && out->len % sizeof(struct llgo_list_entry))
		return cli_die("malformed list answer from llgo-heapd");
	return rc;
}

int cli_io_write_file(const char *file, const struct buf *b)
{
	if (strcmp(file, "-") == 0) {
		if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0)
			return cli_die("writing to stdout: %s", strerror(errno));
		return 0;
	}
	/* FILE exists and is not a regular file (a device such as /dev/null, a FIFO, a tty):
	 * write it in place. A temporary and a rename would replace the device itself with a
	 * regular file (run as root, /dev is writable). No O_CREAT and O_NOFOLLOW: only what
	 * lstat saw is opened; if it became a regular file meanwhile, the temporary path below
	 * is taken. A symlink to something other than a regular file (/dev/stdout) is refused:
	 * following it could write through a link another user planted, and renaming over it
	 * would destroy it; -o - writes to stdout. */
	struct stat ls;
	if (lstat(file, &ls) == 0) {
		if (S_ISLNK(ls.st_mode)) {
			struct stat ts;
			if (stat(file, &ts) == 0 && !S_ISREG(ts.st_mode))
				return cli_die("cannot write %s: a symlink to something other than a "
					       "regular file is neither followed nor replaced (-o - "
					       "writes to stdout)",
					       file);
		} else if (!S_ISREG(ls.st_mode)) {
			int fd = open(file, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
			if (fd < 0)
				return cli_die("cannot write %s: %s", file, strerror(errno));
			struct stat fs;
			if (fstat(fd, &fs) != 0 || S_ISREG(fs.st_mode)) {
				close(fd); /* replaced meanwhile: the temporary path below */
			} else {
				size_t off = 0;
				while (off < b->len) {
					ssize_t w = write(fd, b->data + off, b->len - off);
					if (w < 0 && errno == EINTR)
						continue;
					if (w <= 0) {
						int e = w < 0 ? errno : EIO;
						close(fd);
						return cli_die("cannot write %s: %s", file, strerror(e));
					}
					off += (size_t)w;
				}
				if (close(fd) != 0 && errno != EINTR)
					return cli_die("cannot write %s: %s", file, strerror(errno));
				return 0;
			}
		}
	}
	/* Write a temporary file and rename it, so a full disk never leaves half a profile
	 * under the requested name. The temporary name is unpredictable and created with
	 * O_EXCL (mkostemp), which never follows a symlink another user planted in the folder
	 * (run as root, a predictable name would write through it); rename replaces a link at
	 * FILE itself, never its target. */
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", file) >= (int)sizeof(tmp))
		return cli_die("%s: path too long", file);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return cli_die("cannot write %s: %s", file, strerror(errno));
	mode_t um = umask(0);
	umask(um);
	if (fchmod(fd, 0666 & ~um) != 0) { /* what fopen would have made */
		int e = errno;
		close(fd);
		unlink(tmp);
		return cli_die("cannot write %s: %s", file, strerror(e));
	}
	FILE *f = fdopen(fd, "wb");
	if (!f) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return cli_die("cannot write %s: %s", file, strerror(e));
	}
	size_t w = fwrite(b->data, 1, b->len, f);
	int err = (w != b->len || fflush(f) != 0 || fsync(fileno(f)) != 0) ? errno : 0;
	if (fclose(f) != 0 && !err)
		err = errno;
	if (!err && rename(tmp, file) != 0)
		err = errno;
	if (err) {
		unlink(tmp);
		return cli_die("cannot write %s: %s", file, strerror(err ? err : EIO));
	}
	return 0;
}
