// SPDX-License-Identifier: MIT
/*
 * push.c: llgo-heapd --push URL, one HTTP POST per periodic snapshot to a Pyroscope-compatible
 * ingest endpoint: URL/ingest?name=APP.memory{pid=N,uid=U}&from=&until=&format=pprof
 * &spyName=llgo-heap, the body the gzipped pprof itself (Pyroscope reads a raw body for
 * format=pprof), Content-Type application/octet-stream. libcurl does the HTTP (and HTTPS,
 * with the system's CA store); only http and https are allowed, redirects are not followed,
 * and every POST is bounded (connect 5 s at most, the whole request --push-timeout) and
 * aborted at once by push_cancel (the daemon stopping). Which processes are pushed, and
 * when, is dump.c's call.
 */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump_impl.h"

struct push {
	char *url; /* without a trailing '/' */
	unsigned timeout_s;
	_Atomic bool cancel;
};

struct push *push_new(const char *url, unsigned timeout_s, char *err, size_t errlen)
{
	if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
		snprintf(err, errlen, "--push: want an http:// or https:// URL: %s", url);
		return NULL;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(err, errlen, "--push: libcurl failed to start");
		return NULL;
	}
	struct push *p = calloc(1, sizeof(*p));
	if (p)
		p->url = strdup(url);
	if (!p || !p->url) {
		free(p);
		curl_global_cleanup();
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	size_t n = strlen(p->url);
	while (n > 8 && p->url[n - 1] == '/')
		p->url[--n] = '\0';
	p->timeout_s = timeout_s ? timeout_s : DUMP_DEFAULT_PUSH_TIMEOUT_S;
	return p;
}

void push_free(struct push *p)
{
	if (!p)
		return;
	free(p->url);
	free(p);
	curl_global_cleanup();
}

void push_cancel(struct push *p)
{
	if (p)
		atomic_store(&p->cancel, true);
}

static int push_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			 curl_off_t ulnow)
{
	struct push *p = arg;
	return atomic_load(&p->cancel) ? 1 : 0;
}

/* The answer's body is not needed: discard it. */
static size_t push_discard(char *ptr, size_t size, size_t nmemb, void *arg)
{
	return size * nmemb;
}

int push_send(struct push *p, const char *service, pid_t pid, uid_t uid, uint64_t from_s,
	      uint64_t until_s, const void *data, size_t len, char *err, size_t errlen)
{
	if (atomic_load(&p->cancel)) {
		snprintf(err, errlen, "stopping");
		return -ECANCELED;
	}
	CURL *c = curl_easy_init();
	if (!c) {
		snprintf(err, errlen, "libcurl: out of memory");
		return -ENOMEM;
	}
	char app[64], name[160];
	dump_safe_name(service, app, sizeof(app));
	snprintf(name, sizeof(name), "%s.memory{pid=%d,uid=%u}", app, (int)pid, (unsigned)uid);
	char *ename = curl_easy_escape(c, name, 0);
	char *url = NULL;
	int rc = 0;
	if (!ename || asprintf(&url, "%s/ingest?name=%s&from=%" PRIu64 "&until=%" PRIu64
				     "&format=pprof&spyName=llgo-heap",
			       p->url, ename, from_s, until_s) < 0) {
		url = NULL;
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
	}
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	char cerr[CURL_ERROR_SIZE] = "";
	if (!rc) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)p->timeout_s);
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(c, CURLOPT_USERAGENT, "llgo-heapd");
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, push_discard);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, push_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, p);
		CURLcode cc = curl_easy_perform(c);
		long status = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (cc != CURLE_OK) {
			snprintf(err, errlen, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
			rc = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
			     : cc == CURLE_ABORTED_BY_CALLBACK ? -ECANCELED
							       : -EIO;
		} else if (status < 200 || status > 299) {
			snprintf(err, errlen, "HTTP status %ld", status);
			rc = -EPROTO;
		}
	}
	curl_slist_free_all(hdr);
	curl_free(ename);
	free(url);
	curl_easy_cleanup(c);
	return rc;
}
