// SPDX-License-Identifier: MIT
/*
 * http_auth.c: the optional bearer token of llgo-heapd's HTTP server (--http-token-file).
 * The file holds the token (surrounding white space ignored, as Prometheus reads its
 * credentials_file); every request but the index (/) must carry "Authorization: Bearer
 * TOKEN" (RFC 6750; the bare token is accepted too, see http_auth_check), compared in
 * constant time, or gets 401 with WWW-Authenticate: Bearer.
 * The file is read at start and again on http_auth_reload (SIGHUP); a reload that fails
 * keeps the token in force. As the configuration file (config.c), a token file that others
 * than its owner may write, or that a uid other than root or the daemon's owns, is refused.
 *
 * Left to others: which paths need the token and when to reload (http.c, daemon.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http_internal.h"

#define HTTP_AUTH_MAX 4096u /* bytes of a token file */

/* The token of path: its content without surrounding white space (as Prometheus reads a
 * credentials_file), visible ASCII only, at most HTTP_AUTH_MAX bytes. */
static int http_auth_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	*out = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "--http-token-file %s: %s", path, strerror(errno));
		return -errno;
	}
	struct stat st;
	char *buf = malloc(HTTP_AUTH_MAX + 1);
	ssize_t n = -1;
	int rc = 0;
	if (!buf) {
		rc = -ENOMEM;
		snprintf(err, errlen, "--http-token-file %s: out of memory", path);
	} else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, errlen, "--http-token-file %s: not a regular file", path);
	} else if ((st.st_mode & (S_IWGRP | S_IWOTH)) ||
		   (st.st_uid != 0 && st.st_uid != geteuid())) {
		/* config.c's rule: whoever can write the token decides who reads profiles */
		rc = -EPERM;
		snprintf(err, errlen, "--http-token-file %s: writable by others than its owner, "
			 "or owned by uid %u: refused", path, (unsigned)st.st_uid);
	} else if ((n = read(fd, buf, HTTP_AUTH_MAX + 1)) < 0) {
		rc = -errno;
		snprintf(err, errlen, "--http-token-file %s: %s", path, strerror(errno));
	} else if ((size_t)n > HTTP_AUTH_MAX) {
		rc = -EFBIG;
		snprintf(err, errlen, "--http-token-file %s: longer than %u bytes", path,
			 HTTP_AUTH_MAX);
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	size_t b = 0, e = (size_t)n;
	while (b < e && strchr(" \t\r\n\v\f", buf[b]))
		b++;
	while (e > b && strchr(" \t\r\n\v\f", buf[e - 1]))
		e--;
	for (size_t i = b; i < e; i++) {
		if (buf[i] < 0x21 || buf[i] > 0x7e) {
			free(buf);
			snprintf(err, errlen, "--http-token-file %s: the token must be visible ASCII "
				 "without spaces", path);
			return -EINVAL;
		}
	}
	if (b == e) {
		free(buf);
		snprintf(err, errlen, "--http-token-file %s: empty", path);
		return -EINVAL;
	}
	memmove(buf, buf + b, e - b);
	buf[e - b] = '\0';
	if (st.st_mode & S_IROTH)
		log_warn("http: %s is readable by every user", path);
	*out = buf;
	*len = e - b;
	return 0;
}

int http_auth_set_file(struct http_server *h, const char *path, char *err, size_t errlen)
{
	char *token = NULL, *copy = NULL;
	size_t len = 0;
	if (path) {
		int rc = http_auth_read_file(path, &token, &len, err, errlen);
		if (rc)
			return rc;
		if (!(copy = strdup(path))) {
			free(token);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&h->token_lock);
	char *old_token = h->token, *old_path = h->token_path;
	h->token = token;
	h->token_len = len;
	h->token_path = copy;
	pthread_mutex_unlock(&h->token_lock);
	if (old_token)
		explicit_bzero(old_token, strlen(old_token));
	free(old_token);
	free(old_path);
	return 0;
}

int http_auth_reload(struct http_server *h, char *err, size_t errlen)
{
	pthread_mutex_lock(&h->token_lock);
	char *path = h->token_path ? strdup(h->token_path) : NULL;
	bool had = h->token_path != NULL;
	pthread_mutex_unlock(&h->token_lock);
	if (!had)
		return 0;
	if (!path) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* a file that became unreadable or empty keeps the token in force: never open up */
	int rc = http_auth_set_file(h, path, err, errlen);
	free(path);
	return rc;
}

/* Equal, in a time that depends on the length of the presented value only (never on where
 * it differs, nor on the token's length). */
static bool http_auth_equal(const char *given, size_t glen, const char *token, size_t tlen)
{
	volatile unsigned char diff = (unsigned char)(glen != tlen);
	for (size_t i = 0; i < glen; i++)
		diff |= (unsigned char)(given[i] ^ token[i % tlen]);
	return diff == 0;
}

/* Whether the request may pass; *presented: it carried an Authorization header. */
bool http_auth_check(struct http_server *h, struct MHD_Connection *c, bool *presented)
{
	*presented = false;
	pthread_mutex_lock(&h->token_lock);
	if (!h->token) {
		pthread_mutex_unlock(&h->token_lock);
		return true;
	}
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	bool ok = false;
	if (v) {
		*presented = true;
		/* RFC 7235: the scheme is case-insensitive, then one or more spaces. A value
		 * without a scheme is the token alone: Prometheus 2.42's http_sd_configs send
		 * credentials_file so when its authorization block names no type. */
		if (strncasecmp(v, "Bearer ", 7) == 0) {
			v += 7;
			while (*v == ' ')
				v++;
		}
		size_t n = strlen(v);
		while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		if (!memchr(v, ' ', n))
			ok = http_auth_equal(v, n, h->token, h->token_len);
	}
	pthread_mutex_unlock(&h->token_lock);
	return ok;
}

bool http_auth_required(struct http_server *h)
{
	pthread_mutex_lock(&h->token_lock);
	bool required = h->token != NULL;
	pthread_mutex_unlock(&h->token_lock);
	return required;
}

enum MHD_Result http_auth_deny(struct http_server *h, struct MHD_Connection *c,
					 bool presented)
{
	atomic_fetch_add_explicit(&h->unauthorized, 1, memory_order_relaxed);
	static const char body[] = "401 Unauthorized: send Authorization: Bearer TOKEN\n";
	struct MHD_Response *r = MHD_create_response_from_buffer(
		sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	bool ok = MHD_add_response_header(r, "WWW-Authenticate",
					  presented ? "Bearer realm=\"llgo-heapd\", "
						      "error=\"invalid_token\""
						    : "Bearer realm=\"llgo-heapd\"") == MHD_YES &&
		  MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8") ==
			  MHD_YES &&
		  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff") == MHD_YES;
	enum MHD_Result rc = ok ? MHD_queue_response(c, MHD_HTTP_UNAUTHORIZED, r) : MHD_NO;
	MHD_destroy_response(r);
	return rc;
}
