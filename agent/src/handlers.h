/* handlers.h — one request as handlers see it, the field readers they share, and every
 * handler of the dispatch table. A reader that fails has already replied bad_request. */
#ifndef FORKD_HANDLERS_H
#define FORKD_HANDLERS_H

#include "json.h"
#include "loop.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct request {
	const struct json *msg;
	const char *type;
	int64_t id; /* -1 when absent or not a non-negative integer */
};

/* The field, or NULL when absent or null. */
const struct json *req_field(const struct request *rq, const char *key);
bool req_need_id(const struct request *rq);
/* A string without NUL bytes. *out is left alone when the field is absent and optional. */
bool req_string(const struct request *rq, const char *key, bool required, const char **out);
bool req_bool(const struct request *rq, const char *key, bool *out);
bool req_uint(const struct request *rq, const char *key, bool required, int64_t max, int64_t *out);
/* Decodes a base64 field into a malloc'd buffer of at most max bytes. */
bool req_data(const struct request *rq, const char *key, size_t max, unsigned char **out,
	      size_t *len);
/* The same for a `data` chunk (at most MAX_CHUNK) into a buffer that the next call reuses. */
bool req_chunk(const struct request *rq, const char *key, const unsigned char **out, size_t *len);

/* Line framing (input.c). */
void input_feed(const char *data, size_t n);
void input_reset(void);
void dispatch_line(const char *line, size_t len);

/* The host's session ended (sync, or host gone): detach its execs, drop its transfers. */
void session_end(void);

void handle_sync(const struct request *rq);
void handle_ping(const struct request *rq);
void handle_info(const struct request *rq);
void handle_flush(const struct request *rq);
void handle_exec(const struct request *rq);
void handle_stdin(const struct request *rq);
void handle_signal(const struct request *rq);
void handle_file_write(const struct request *rq);
void handle_data(const struct request *rq);
void handle_eof(const struct request *rq);
void handle_file_read(const struct request *rq);
void handle_stat(const struct request *rq);
void handle_list(const struct request *rq);
void handle_mkdir(const struct request *rq);
void handle_remove(const struct request *rq);
void handle_configure(const struct request *rq);

/* xattr.c: user extended attributes. msg_stat_extras adds a stat entry's "target" (a
 * symlink's) or "xattrs" (a file's or directory's user.* attributes), when there are any. */
struct msg;
struct stat;
void msg_stat_extras(struct msg *m, const char *path, const struct stat *st);
void handle_xattr_set(const struct request *rq);

/* spawn.c: keeps the fd limit children start with (once, before the agent raises its own). */
void spawn_init(void);

/* exec.c: the loop's side. */
void exec_poll(struct pollset *ps);
void exec_tick(int64_t now);
void exec_reap(void);
void exec_session_end(void);
void exec_kill_all(void);

/* files.c: the loop's side. */
void files_poll(struct pollset *ps);
void files_tick(void);
void files_session_end(void);

/* signals.c: signal names ("SIGTERM"); -1 for an unknown one. */
int signal_number(const char *name);
const char *signal_name(int sig, char *buf, size_t len);
/* spawn.c, for other families: a spawn with the exec rules (argv, env, cwd, user of the
 * request) onto one fd as stdin/stdout/stderr; -1 once it replied. */
pid_t spawn_on_fd(const struct request *rq, int fd, bool ctty);

/* pty.c: terminal sessions, which outlive a host session (PROTOCOL.md "pty_open"). */
void handle_pty_open(const struct request *rq);
void handle_pty_attach(const struct request *rq);
void handle_pty_input(const struct request *rq);
void handle_pty_resize(const struct request *rq);
void handle_pty_signal(const struct request *rq);
void handle_pty_close(const struct request *rq);
void handle_pty_detach(const struct request *rq);
void handle_pty_list(const struct request *rq);
void pty_poll(struct pollset *ps);
void pty_tick(int64_t now);
void pty_reap(void);
void pty_session_end(void);
void pty_hangup_all(void);

#endif
