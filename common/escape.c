// SPDX-License-Identifier: MIT
/*
 * escape.c: names written into text outputs (the legacy heap text, folded stacks, `top`,
 * the CLI's tables) come from files the profiled process chose: a symbol may hold a newline
 * (a forged sample line in the legacy text, which go tool pprof would read) or ESC sequences
 * (which reach the terminal of whoever runs `llgo-heap top`, root included). Every such name
 * goes through escape_append: printable ASCII and well-formed UTF-8 outside the C1 range pass
 * as they are; everything else becomes \xNN, and backslash becomes \\ so the escaping cannot
 * be forged either. pprof keeps names as length-delimited data and is left to its readers.
 */
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* Length of the well-formed, non-C1 UTF-8 sequence at p (>= 2), or 0. */
static size_t escape_utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	size_t n;
	unsigned cp;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0; /* also stops at the NUL */
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	/* overlong, surrogates, beyond U+10FFFF, and the C1 controls U+0080..U+009F */
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0)
		return 0;
	return n;
}

static bool escape_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '\\';
}

bool escape_needed(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		if (escape_plain(*p)) {
			p++;
			continue;
		}
		size_t n = *p >= 0x80 ? escape_utf8_len(p) : 0;
		if (!n)
			return true;
		p += n;
	}
	return false;
}

int escape_append(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		const unsigned char *q = p;
		while (escape_plain(*q))
			q++;
		if (q > p)
			buf_append(b, p, (size_t)(q - p));
		p = q;
		if (!*p)
			break;
		size_t n = *p >= 0x80 ? escape_utf8_len(p) : 0;
		if (n) {
			buf_append(b, p, n);
			p += n;
		} else if (*p == '\\') {
			buf_append(b, "\\\\", 2);
			p++;
		} else {
			char e[4] = { '\\', 'x', hex[*p >> 4], hex[*p & 15] };
			buf_append(b, e, 4);
			p++;
		}
	}
	return b->failed ? -1 : 0;
}

char *escape_dup(const char *s)
{
	if (!escape_needed(s))
		return strdup(s);
	struct buf b;
	buf_init(&b);
	escape_append(&b, s);
	buf_putc(&b, '\0');
	if (b.failed) {
		buf_free(&b);
		return NULL;
	}
	return (char *)b.data;
}
