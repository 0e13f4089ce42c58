/* jbuf.c — the JSON writer: a growable buffer that replies are built in. After a failed
 * allocation it drops every later write and says so (oom), so a caller checks once. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool jbuf_reserve(struct jbuf *b, size_t extra)
{
	if (b->oom)
		return false;
	if (b->cap - b->len >= extra)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < extra)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void jbuf_put(struct jbuf *b, const void *s, size_t n)
{
	if (!jbuf_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void jbuf_puts(struct jbuf *b, const char *s)
{
	jbuf_put(b, s, strlen(s));
}

void jbuf_int(struct jbuf *b, int64_t v)
{
	char tmp[24];
	int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
	jbuf_put(b, tmp, (size_t)n);
}

void jbuf_string(struct jbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	/* Worst case: every byte becomes a 6-byte escape. */
	if (!jbuf_reserve(b, n * 6 + 2))
		return;
	char *o = b->p + b->len;
	*o++ = '"';
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		unsigned char c = u[i];
		if (c >= 0x80) {
			size_t len = utf8_seq_len(u + i, n - i);
			if (len == 0) {
				memcpy(o, "\\ufffd", 6);
				o += 6;
				i++;
			} else {
				memcpy(o, u + i, len);
				o += len;
				i += len;
			}
			continue;
		}
		i++;
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c == '\n') {
			*o++ = '\\', *o++ = 'n';
		} else if (c == '\r') {
			*o++ = '\\', *o++ = 'r';
		} else if (c == '\t') {
			*o++ = '\\', *o++ = 't';
		} else if (c < 0x20 || c == 0x7F) {
			*o++ = '\\', *o++ = 'u', *o++ = '0', *o++ = '0';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else {
			*o++ = (char)c;
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->p);
}
