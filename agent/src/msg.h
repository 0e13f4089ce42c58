/* msg.h — building one reply line ({"type":..,"id":..,...}\n) and the common replies. */
#ifndef FORKD_MSG_H
#define FORKD_MSG_H

#include "json.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

struct msg {
	struct jbuf b;
	bool comma;
};

/* id < 0 is written as null. */
void msg_begin(struct msg *m, const char *type, int64_t id);
/* The same, preceded by the resync byte (the sync reply). */
void msg_begin_resync(struct msg *m, const char *type, int64_t id);
void msg_str(struct msg *m, const char *key, const char *s);
void msg_strn(struct msg *m, const char *key, const char *s, size_t n);
void msg_int(struct msg *m, const char *key, int64_t v);
void msg_bool(struct msg *m, const char *key, bool v);
void msg_null(struct msg *m, const char *key);
void msg_b64(struct msg *m, const char *key, const void *data, size_t n);
/* key is NULL for an element of an array. */
void msg_open(struct msg *m, const char *key, char bracket);
void msg_close(struct msg *m, char bracket);
/* name, kind, size, mode, mtime_ms of a stat result. */
void msg_stat(struct msg *m, const char *name, const struct stat *st);
void msg_send(struct msg *m);

void reply_ok(int64_t id);
void reply_error(int64_t id, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same with "field": the request field the error is about (exec: argv, cwd, user). */
void reply_error_field(int64_t id, const char *code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The code for err (PROTOCOL.md), message "<fmt>: <strerror>". */
void reply_errno(int64_t id, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void reply_errno_field(int64_t id, int err, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
const char *errno_code(int err);

#endif
