/* exec.c — the exec family: a command started (spawn.c) with its stdout/stderr streamed, its
 * stdin fed from a buffer, signalled, killed at its timeout, its exit reported. Nothing
 * here blocks the loop on a child: pipes are non-blocking, and execs of an old session keep
 * being drained (output discarded) so no child ever waits forever on a full pipe. */
#include "agent.h"
#include "handlers.h"
#include "msg.h"
#include "out.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_EXECS 256
#define READ_CHUNK (64 * 1024)
#define STDIN_CAP (8 * 1024 * 1024)
#define EOF_GRACE_MS 100
#define FINAL_DRAIN_CAP (4 * 1024 * 1024)
#define PIPE_SIZE (1024 * 1024) /* fewer wake-ups for a chatty child under TCG */

struct exec {
	struct exec *next;
	int64_t id;
	bool detached; /* old session: output discarded, exit not reported */
	pid_t pid;     /* also its process group and session */
	int out_fd, err_fd, in_fd;
	char *in_buf;
	size_t in_len, in_off;
	bool in_eof;
	int64_t started_ms, deadline_ms, exited_ms;
	bool exited, timed_out;
	int status;
};

static struct exec *execs;
static size_t n_execs;
static char read_buf[READ_CHUNK];

static struct exec *find_current(int64_t id)
{
	for (struct exec *e = execs; e; e = e->next)
		if (!e->detached && e->id == id)
			return e;
	return NULL;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- starting ---- */

/* The pipes: parent ends non-blocking, all CLOEXEC. fds[0..2]: child in/out/err;
 * fds[3..5]: parent's stdin writer, stdout reader, stderr reader. */
static int make_pipes(bool want_stdin, int fds[6])
{
	int p[2];
	for (int i = 0; i < 6; i++)
		fds[i] = -1;
	if (want_stdin) {
		if (pipe2(p, O_CLOEXEC) < 0)
			return errno;
		fds[0] = p[0], fds[3] = p[1];
	} else if ((fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		/* No /dev/null (a bare initramfs): a pipe already at EOF reads the same. */
		if (pipe2(p, O_CLOEXEC) < 0)
			return errno;
		fds[0] = p[0];
		close(p[1]);
	}
	for (int i = 1; i <= 2; i++) {
		if (pipe2(p, O_CLOEXEC) < 0)
			return errno;
		fds[i + 3] = p[0], fds[i] = p[1];
		fcntl(p[0], F_SETPIPE_SZ, PIPE_SIZE);
	}
	for (int i = 3; i < 6; i++)
		if (fds[i] >= 0)
			fcntl(fds[i], F_SETFL, O_NONBLOCK);
	return 0;
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close_fd(&fds[i]);
}

static void start(const struct request *rq, struct spec *s, struct launch *l)
{
	int fds[6];
	int err = make_pipes(s->want_stdin, fds);
	if (err) {
		close_all(fds, 6);
		reply_errno(rq->id, err, "exec: pipes");
		return;
	}
	struct exec *e = calloc(1, sizeof *e);
	if (!e) {
		close_all(fds, 6);
		reply_errno(rq->id, ENOMEM, "exec");
		return;
	}
	l->in = fds[0], l->out = fds[1], l->err = fds[2];
	struct failure f;
	pid_t pid = spawn_start(l, &f);
	close_all(fds, 3);
	if (pid < 0) {
		close_all(fds + 3, 3);
		free(e);
		spawn_reply_failure(rq->id, s, &f);
		return;
	}
	*e = (struct exec){.next = execs, .id = rq->id, .pid = pid, .in_fd = fds[3],
			   .out_fd = fds[4], .err_fd = fds[5], .started_ms = now_ms()};
	if (s->timeout_ms > 0)
		e->deadline_ms = e->started_ms + s->timeout_ms;
	execs = e;
	n_execs++;
	struct msg m;
	msg_begin(&m, "started", rq->id);
	msg_int(&m, "pid", pid);
	msg_send(&m);
}

void handle_exec(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	static struct spec s; /* argv alone is 32 KiB: keep it off the stack */
	memset(&s, 0, sizeof s);
	if (!spawn_read_spec(rq, &s))
		return;
	if (find_current(rq->id)) {
		reply_error(rq->id, "bad_request", "exec: id %lld is already running", (long long)rq->id);
		return;
	}
	if (n_execs >= MAX_EXECS) {
		reply_error(rq->id, "busy", "exec: %d commands are already running", MAX_EXECS);
		return;
	}
	struct launch l = {0};
	if (!spawn_prepare(rq, &s, &l))
		return;
	start(rq, &s, &l);
	spawn_free(&s, &l);
}

/* ---- stdin and signal ---- */

static void kill_group(struct exec *e, int sig)
{
	if (!e->exited)
		kill(-e->pid, sig);
}

/* An error that carries an exec's id is that exec's terminal: nothing may follow it. */
static void abandon(struct exec *e)
{
	kill_group(e, SIGKILL);
	e->detached = true;
}

static void flush_stdin(struct exec *e)
{
	while (e->in_fd >= 0 && e->in_off < e->in_len) {
		ssize_t w = write(e->in_fd, e->in_buf + e->in_off, e->in_len - e->in_off);
		if (w > 0) {
			e->in_off += (size_t)w;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		close_fd(&e->in_fd); /* EPIPE: the reader is gone, so is the rest of its input */
	}
	free(e->in_buf);
	e->in_buf = NULL;
	e->in_len = e->in_off = 0;
	if (e->in_eof)
		close_fd(&e->in_fd);
}

static bool buffer_stdin(struct exec *e, const unsigned char *data, size_t n)
{
	if (e->in_off > 0) {
		memmove(e->in_buf, e->in_buf + e->in_off, e->in_len - e->in_off);
		e->in_len -= e->in_off;
		e->in_off = 0;
	}
	if (e->in_len + n > STDIN_CAP)
		return false;
	char *b = realloc(e->in_buf, e->in_len + n);
	if (!b)
		return false;
	memcpy(b + e->in_len, data, n);
	e->in_buf = b;
	e->in_len += n;
	return true;
}

void handle_stdin(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	struct exec *e = find_current(rq->id);
	if (!e) {
		reply_error(rq->id, "no_such_request", "stdin: no exec %lld running", (long long)rq->id);
		return;
	}
	bool eof = false;
	const unsigned char *data = NULL;
	size_t n = 0;
	if (!req_bool(rq, "eof", &eof) || (req_field(rq, "data") && !req_chunk(rq, "data", &data, &n))) {
		abandon(e);
		return;
	}
	if (n > 0 && e->in_fd >= 0 && !e->in_eof && !buffer_stdin(e, data, n)) {
		reply_error(rq->id, "too_large", "stdin: more than %d bytes waiting for the process",
			    STDIN_CAP);
		abandon(e);
	} else {
		if (eof)
			e->in_eof = true;
		flush_stdin(e);
	}
}

void handle_signal(const struct request *rq)
{
	const char *name = NULL;
	int64_t target = -1;
	if (!req_need_id(rq) || !req_uint(rq, "target", true, INT64_MAX, &target) ||
	    !req_string(rq, "signal", true, &name))
		return;
	int sig = signal_number(name);
	if (sig < 0) {
		reply_error(rq->id, "bad_request", "signal: unknown signal %s", name);
		return;
	}
	struct exec *e = find_current(target);
	if (!e) {
		reply_error(rq->id, "no_such_request", "signal: no exec %lld running", (long long)target);
		return;
	}
	/* After the exit the group may be empty and its number reusable: leave it alone. */
	if (!e->exited && kill(-e->pid, sig) < 0 && errno != ESRCH)
		reply_errno(rq->id, errno, "signal %s", name);
	else
		reply_ok(rq->id);
}

/* ---- the loop's side ---- */

static void send_output(struct exec *e, const char *type, const char *data, size_t n)
{
	if (e->detached)
		return;
	struct msg m;
	msg_begin(&m, type, e->id);
	msg_b64(&m, "data", data, n);
	msg_send(&m);
}

/* One read; false when the stream is finished (EOF or error) and closed. */
static bool read_stream(struct exec *e, int *fd, const char *type)
{
	if (*fd < 0)
		return false;
	ssize_t n = read(*fd, read_buf, sizeof read_buf);
	if (n > 0) {
		send_output(e, type, read_buf, (size_t)n);
		return true;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return false;
	close_fd(fd);
	return false;
}

static void on_stdout(void *ctx, short revents)
{
	(void)revents;
	struct exec *e = ctx;
	read_stream(e, &e->out_fd, "stdout");
}

static void on_stderr(void *ctx, short revents)
{
	(void)revents;
	struct exec *e = ctx;
	read_stream(e, &e->err_fd, "stderr");
}

static void on_stdin_ready(void *ctx, short revents)
{
	(void)revents;
	flush_stdin(ctx);
}

void exec_poll(struct pollset *ps)
{
	for (struct exec *e = execs; e; e = e->next) {
		bool hold = !e->detached && out_full();
		if (e->out_fd >= 0 && !hold)
			pollset_add(ps, e->out_fd, POLLIN, on_stdout, e);
		if (e->err_fd >= 0 && !hold)
			pollset_add(ps, e->err_fd, POLLIN, on_stderr, e);
		if (e->in_fd >= 0 && e->in_off < e->in_len)
			pollset_add(ps, e->in_fd, POLLOUT, on_stdin_ready, e);
		if (!e->exited && e->deadline_ms && !e->timed_out)
			pollset_wake_at(ps, e->deadline_ms);
		if (e->exited && !hold)
			pollset_wake_at(ps, e->exited_ms + EOF_GRACE_MS);
	}
}

void exec_reap(void)
{
	int status;
	pid_t pid;
	pty_reap(); /* terminal sessions first: waitpid(-1) below would take their status */
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (struct exec *e = execs; e; e = e->next) {
			if (e->pid == pid && !e->exited) {
				e->exited = true;
				e->status = status;
				e->exited_ms = now_ms();
				break;
			}
		}
	}
}

/* What a background grandchild left in the pipes, bounded in case it keeps writing. */
static void final_drain(struct exec *e)
{
	size_t budget = FINAL_DRAIN_CAP;
	while (budget > 0 && read_stream(e, &e->out_fd, "stdout"))
		budget = budget > READ_CHUNK ? budget - READ_CHUNK : 0;
	budget = FINAL_DRAIN_CAP;
	while (budget > 0 && read_stream(e, &e->err_fd, "stderr"))
		budget = budget > READ_CHUNK ? budget - READ_CHUNK : 0;
	close_fd(&e->out_fd);
	close_fd(&e->err_fd);
}

static bool finished(struct exec *e, int64_t now)
{
	if (!e->exited)
		return false;
	if (e->out_fd < 0 && e->err_fd < 0)
		return true;
	/* Not while the host is behind: the grace is for silent pipes, not for a slow host. */
	if (now < e->exited_ms + EOF_GRACE_MS || (!e->detached && out_full()))
		return false;
	final_drain(e);
	return true;
}

static void report(struct exec *e)
{
	char buf[16];
	struct msg m;
	msg_begin(&m, "result", e->id);
	if (WIFSIGNALED(e->status)) {
		msg_null(&m, "exit_code");
		msg_str(&m, "signal", signal_name(WTERMSIG(e->status), buf, sizeof buf));
	} else {
		msg_int(&m, "exit_code", WEXITSTATUS(e->status));
		msg_null(&m, "signal");
	}
	msg_bool(&m, "timed_out", e->timed_out);
	msg_int(&m, "duration_ms", e->exited_ms - e->started_ms);
	msg_send(&m);
}

void exec_tick(int64_t now)
{
	for (struct exec **pp = &execs; *pp;) {
		struct exec *e = *pp;
		if (!e->exited && e->deadline_ms && !e->timed_out && now >= e->deadline_ms) {
			kill_group(e, SIGKILL);
			e->timed_out = true;
		}
		if (!finished(e, now)) {
			pp = &e->next;
			continue;
		}
		if (!e->detached)
			report(e);
		close_fd(&e->in_fd);
		free(e->in_buf);
		*pp = e->next;
		free(e);
		n_execs--;
	}
}

void exec_session_end(void)
{
	for (struct exec *e = execs; e; e = e->next)
		e->detached = true;
}

void exec_kill_all(void)
{
	for (struct exec *e = execs; e; e = e->next)
		kill_group(e, SIGKILL);
}
