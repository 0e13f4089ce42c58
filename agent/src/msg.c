/* msg.c — reply lines. Each is built whole in one buffer and handed to out.c, so a line
 * reaches the channel in as few writes as possible and never interleaves with another. */
#include "msg.h"

#include "base64.h"
#include "log.h"
#include "out.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void begin(struct msg *m, const char *prefix, const char *type, int64_t id)
{
	memset(m, 0, sizeof *m);
	jbuf_reserve(&m->b, 256);
	jbuf_puts(&m->b, prefix);
	jbuf_puts(&m->b, "{\"type\":");
	jbuf_string(&m->b, type, strlen(type));
	m->comma = true;
	if (id >= 0)
		msg_int(m, "id", id);
	else
		msg_null(m, "id");
}

void msg_begin(struct msg *m, const char *type, int64_t id)
{
	begin(m, "", type, id);
}

void msg_begin_resync(struct msg *m, const char *type, int64_t id)
{
	begin(m, "\xff", type, id);
}

static void key(struct msg *m, const char *k)
{
	if (m->comma)
		jbuf_put(&m->b, ",", 1);
	m->comma = true;
	if (k) {
		jbuf_string(&m->b, k, strlen(k));
		jbuf_put(&m->b, ":", 1);
	}
}

void msg_strn(struct msg *m, const char *k, const char *s, size_t n)
{
	key(m, k);
	jbuf_string(&m->b, s, n);
}

void msg_str(struct msg *m, const char *k, const char *s)
{
	msg_strn(m, k, s, strlen(s));
}

void msg_int(struct msg *m, const char *k, int64_t v)
{
	key(m, k);
	jbuf_int(&m->b, v);
}

void msg_bool(struct msg *m, const char *k, bool v)
{
	key(m, k);
	jbuf_puts(&m->b, v ? "true" : "false");
}

void msg_null(struct msg *m, const char *k)
{
	key(m, k);
	jbuf_puts(&m->b, "null");
}

void msg_b64(struct msg *m, const char *k, const void *data, size_t n)
{
	key(m, k);
	if (!jbuf_reserve(&m->b, BASE64_ENCODED_LEN(n) + 2))
		return;
	m->b.p[m->b.len++] = '"';
	m->b.len += base64_encode(m->b.p + m->b.len, data, n);
	m->b.p[m->b.len++] = '"';
}

void msg_open(struct msg *m, const char *k, char bracket)
{
	key(m, k);
	jbuf_put(&m->b, &bracket, 1);
	m->comma = false;
}

void msg_close(struct msg *m, char bracket)
{
	jbuf_put(&m->b, &bracket, 1);
	m->comma = true;
}

static const char *kind_of(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "dir";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

void msg_stat(struct msg *m, const char *name, const struct stat *st)
{
	msg_str(m, "name", name);
	msg_str(m, "kind", kind_of(st->st_mode));
	msg_int(m, "size", (int64_t)st->st_size);
	msg_int(m, "mode", (int64_t)(st->st_mode & 07777));
	msg_int(m, "mtime_ms", (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000);
}

void msg_send(struct msg *m)
{
	jbuf_put(&m->b, "}\n", 2);
	if (m->b.oom) {
		agent_log("out of memory building a reply; dropping the host to force a resync");
		free(m->b.p);
		m->b.p = NULL;
		out_fail();
		return;
	}
	out_send(m->b.p, m->b.len);
	m->b.p = NULL;
}

void reply_ok(int64_t id)
{
	struct msg m;
	msg_begin(&m, "result", id);
	msg_send(&m);
}

/* field: the request field the error is about (PROTOCOL.md), or NULL. */
static void error_line(int64_t id, const char *code, const char *field, const char *text)
{
	struct msg m;
	msg_begin(&m, "error", id);
	msg_str(&m, "code", code);
	if (field)
		msg_str(&m, "field", field);
	msg_str(&m, "message", text);
	msg_send(&m);
}

static void error_vline(int64_t id, const char *code, const char *field, const char *fmt,
			va_list ap)
{
	char text[4096 + 256];
	vsnprintf(text, sizeof text, fmt, ap);
	error_line(id, code, field, text);
}

void reply_error(int64_t id, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_vline(id, code, NULL, fmt, ap);
	va_end(ap);
}

void reply_error_field(int64_t id, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_vline(id, code, field, fmt, ap);
	va_end(ap);
}

const char *errno_code(int err)
{
	switch (err) {
	case ENOENT: return "not_found";
	case EACCES: case EPERM: return "permission";
	case EEXIST: return "exists";
	case ENOTDIR: return "not_dir";
	case EISDIR: return "is_dir";
	default: return "io";
	}
}

static void errno_line(int64_t id, int err, const char *field, const char *fmt, va_list ap)
{
	char text[4096 + 256];
	int n = vsnprintf(text, sizeof text, fmt, ap);
	if (n >= 0 && (size_t)n < sizeof text)
		snprintf(text + n, sizeof text - (size_t)n, ": %s", strerror(err));
	error_line(id, errno_code(err), field, text);
}

void reply_errno(int64_t id, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errno_line(id, err, NULL, fmt, ap);
	va_end(ap);
}

void reply_errno_field(int64_t id, int err, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errno_line(id, err, field, fmt, ap);
	va_end(ap);
}
