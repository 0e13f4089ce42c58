/* pty.c — terminal sessions: a command on a pseudo-terminal (openpty, its own session with the
 * slave as controlling tty), window size, signals to the foreground job, input. Unlike an
 * exec, a session outlives the host session that opened it: on sync it is only detached, its
 * output keeps being read into a ring buffer (so the shell never blocks on a full terminal)
 * and a later pty_attach replays what the ring still holds from the offset the host asks for.
 * A finished session that nobody watched is kept until attached, so its exit is not lost. */
#include "agent.h"
#include "handlers.h"
#include "log.h"
#include "msg.h"
#include "out.h"

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define MAX_PTYS 32
#define RING_CAP (128 * 1024)      /* output kept for a reattach */
#define INPUT_CAP (1024 * 1024)    /* input waiting for the terminal */
#define SEND_CHUNK (64 * 1024)     /* decoded bytes per data message */
#define EOF_GRACE_MS 100           /* a background process may hold the slave after the exit */
#define MAX_SIZE 1000              /* columns and rows */

struct pty {
	struct pty *next;
	int64_t num;   /* the session number, stable across host sessions */
	int64_t req;   /* the attached request's id; -1 when detached */
	pid_t pid;     /* also its process group and session */
	int master;
	char *ring;
	uint64_t total; /* bytes read so far: the offset of the next one */
	uint64_t sent;  /* the attached request has everything before this offset */
	char *in_buf;
	size_t in_len, in_off;
	int64_t started_ms, exited_ms;
	bool exited, eof, finished, discard;
	int status;
};

static struct pty *ptys;
static size_t n_ptys;
static int64_t next_num = 1;
static char read_buf[SEND_CHUNK];

static struct pty *find_num(int64_t num)
{
	for (struct pty *p = ptys; p; p = p->next)
		if (p->num == num && !p->discard)
			return p;
	return NULL;
}

static struct pty *find_req(int64_t id)
{
	for (struct pty *p = ptys; p; p = p->next)
		if (p->req >= 0 && p->req == id)
			return p;
	return NULL;
}

static uint64_t ring_start(const struct pty *p)
{
	return p->total > RING_CAP ? p->total - RING_CAP : 0;
}

static void ring_put(struct pty *p, const char *data, size_t n)
{
	for (size_t done = 0; done < n;) {
		size_t at = (size_t)(p->total % RING_CAP);
		size_t k = RING_CAP - at < n - done ? RING_CAP - at : n - done;
		memcpy(p->ring + at, data + done, k);
		done += k;
		p->total += k;
	}
}

/* What the attached request has not had yet, in order, each chunk with its offset (a gap
 * shows as a jump: the ring had lost those bytes). */
static void send_pending(struct pty *p)
{
	if (p->req < 0)
		return;
	if (p->sent < ring_start(p))
		p->sent = ring_start(p);
	while (p->sent < p->total) {
		size_t at = (size_t)(p->sent % RING_CAP);
		uint64_t left = p->total - p->sent;
		size_t k = RING_CAP - at;
		if (k > left)
			k = (size_t)left;
		if (k > SEND_CHUNK)
			k = SEND_CHUNK;
		struct msg m;
		msg_begin(&m, "data", p->req);
		msg_b64(&m, "data", p->ring + at, k);
		msg_int(&m, "offset", (int64_t)p->sent);
		msg_send(&m);
		p->sent += k;
	}
}

static void close_master(struct pty *p)
{
	if (p->master >= 0)
		close(p->master);
	p->master = -1;
	p->eof = true;
}

/* One read; false when nothing more is to be had now. */
static bool read_master(struct pty *p)
{
	if (p->master < 0)
		return false;
	ssize_t n = read(p->master, read_buf, sizeof read_buf);
	if (n > 0) {
		ring_put(p, read_buf, (size_t)n);
		send_pending(p);
		return true;
	}
	/* EIO: every holder of the slave closed it. */
	if (n == 0 || (errno != EAGAIN && errno != EINTR))
		close_master(p);
	return false;
}

static void flush_input(struct pty *p)
{
	while (p->master >= 0 && p->in_off < p->in_len) {
		ssize_t w = write(p->master, p->in_buf + p->in_off, p->in_len - p->in_off);
		if (w > 0) {
			p->in_off += (size_t)w;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		break; /* the terminal is gone, so is its input */
	}
	free(p->in_buf);
	p->in_buf = NULL;
	p->in_len = p->in_off = 0;
}

static bool buffer_input(struct pty *p, const unsigned char *data, size_t n)
{
	if (p->in_off > 0) {
		memmove(p->in_buf, p->in_buf + p->in_off, p->in_len - p->in_off);
		p->in_len -= p->in_off;
		p->in_off = 0;
	}
	if (p->in_len + n > INPUT_CAP)
		return false;
	char *b = realloc(p->in_buf, p->in_len + n);
	if (!b)
		return false;
	memcpy(b + p->in_len, data, n);
	p->in_buf = b;
	p->in_len += n;
	return true;
}

/* Like a terminal closing: the shell's group is killed, the foreground job hung up. */
static void hangup(struct pty *p)
{
	if (p->exited)
		return;
	if (p->master >= 0) {
		pid_t fg = tcgetpgrp(p->master);
		if (fg > 0 && fg != p->pid)
			kill(-fg, SIGHUP);
	}
	kill(-p->pid, SIGKILL);
	close_master(p);
}

static void free_pty(struct pty *p)
{
	close_master(p);
	free(p->ring);
	free(p->in_buf);
	free(p);
	n_ptys--;
}

static void unlink_pty(struct pty *victim)
{
	for (struct pty **pp = &ptys; *pp; pp = &(*pp)->next) {
		if (*pp == victim) {
			*pp = victim->next;
			free_pty(victim);
			return;
		}
	}
}

/* Room for one more: the oldest finished session nobody attached to makes way. */
static bool make_room(void)
{
	if (n_ptys < MAX_PTYS)
		return true;
	struct pty *oldest = NULL;
	for (struct pty *p = ptys; p; p = p->next)
		if (p->finished && p->req < 0)
			oldest = p; /* the list is newest first */
	if (!oldest)
		return false;
	unlink_pty(oldest);
	return true;
}

static bool read_size(const struct request *rq, struct winsize *ws)
{
	int64_t cols = 0, rows = 0;
	if (!req_uint(rq, "cols", true, MAX_SIZE, &cols) || !req_uint(rq, "rows", true, MAX_SIZE, &rows))
		return false;
	if (cols < 1 || rows < 1) {
		reply_error(rq->id, "bad_request", "%s: \"cols\" and \"rows\" must be 1 to %d", rq->type,
			    MAX_SIZE);
		return false;
	}
	*ws = (struct winsize){.ws_col = (unsigned short)cols, .ws_row = (unsigned short)rows};
	return true;
}

/* The attachment ends (its terminal result says detached); the session goes on. */
static void detach(struct pty *p)
{
	if (p->req < 0)
		return;
	struct msg m;
	msg_begin(&m, "result", p->req);
	msg_bool(&m, "detached", true);
	msg_send(&m);
	p->req = -1;
}

static void reply_started(const struct request *rq, const struct pty *p)
{
	struct msg m;
	msg_begin(&m, "started", rq->id);
	msg_int(&m, "pid", p->pid);
	msg_int(&m, "pty", p->num);
	msg_int(&m, "offset", (int64_t)p->sent);
	msg_send(&m);
}

static struct pty *new_pty(void)
{
	struct pty *p = calloc(1, sizeof *p);
	if (p && !(p->ring = malloc(RING_CAP))) {
		free(p);
		return NULL;
	}
	return p;
}

void handle_pty_open(const struct request *rq)
{
	struct winsize ws;
	if (!req_need_id(rq) || !read_size(rq, &ws))
		return;
	if (find_req(rq->id)) {
		reply_error(rq->id, "bad_request", "pty_open: id %lld is in use", (long long)rq->id);
		return;
	}
	if (!make_room()) {
		reply_error(rq->id, "busy", "pty_open: %d terminal sessions are open", MAX_PTYS);
		return;
	}
	struct pty *p = new_pty();
	int master = -1, slave = -1;
	if (!p || openpty(&master, &slave, NULL, NULL, &ws) < 0) {
		reply_errno(rq->id, p ? errno : ENOMEM, "pty_open: openpty");
		free(p ? p->ring : NULL);
		free(p);
		return;
	}
	fcntl(master, F_SETFD, FD_CLOEXEC);
	fcntl(slave, F_SETFD, FD_CLOEXEC);
	fcntl(master, F_SETFL, O_NONBLOCK);
	pid_t pid = spawn_on_fd(rq, slave, true);
	close(slave);
	if (pid < 0) {
		close(master);
		free(p->ring);
		free(p);
		return;
	}
	*p = (struct pty){.next = ptys, .num = next_num++, .req = rq->id, .pid = pid,
			  .master = master, .ring = p->ring, .started_ms = now_ms()};
	ptys = p;
	n_ptys++;
	reply_started(rq, p);
}

void handle_pty_attach(const struct request *rq)
{
	int64_t num = -1, since = 0;
	if (!req_need_id(rq) || !req_uint(rq, "pty", true, INT64_MAX, &num) ||
	    !req_uint(rq, "since", false, INT64_MAX, &since))
		return;
	struct pty *p = find_num(num);
	if (!p) {
		reply_error(rq->id, "no_such_request", "pty_attach: no terminal session %lld",
			    (long long)num);
		return;
	}
	struct pty *other = find_req(rq->id);
	if ((other && other != p) || (uint64_t)since > p->total) {
		reply_error(rq->id, "bad_request", other && other != p ? "pty_attach: id %lld is in use"
								 : "pty_attach: \"since\" is past the output (%lld)",
			    other && other != p ? (long long)rq->id : (long long)p->total);
		return;
	}
	/* One watcher at a time: the previous one is told it was replaced. */
	if (p->req != rq->id)
		detach(p);
	p->req = rq->id;
	p->sent = (uint64_t)since;
	if (p->sent < ring_start(p))
		p->sent = ring_start(p);
	reply_started(rq, p);
	send_pending(p);
}

/* Every session the guest holds, finished-but-unreported ones too (a reattach gets their exit). */
void handle_pty_list(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	int64_t now = now_ms();
	struct msg m;
	msg_begin(&m, "result", rq->id);
	msg_open(&m, "sessions", '[');
	for (struct pty *p = ptys; p; p = p->next) {
		if (p->discard)
			continue;
		msg_open(&m, NULL, '{');
		msg_int(&m, "pty", p->num);
		msg_int(&m, "pid", p->pid);
		msg_bool(&m, "attached", p->req >= 0);
		msg_bool(&m, "exited", p->exited);
		msg_int(&m, "offset", (int64_t)p->total);
		msg_int(&m, "age_ms", now - p->started_ms);
		msg_close(&m, '}');
	}
	msg_close(&m, ']');
	msg_send(&m);
}

/* The session a follow-up names by its open/attach request id, or NULL (replied). */
static struct pty *target_of(const struct request *rq, const char *key)
{
	int64_t target = rq->id;
	if (key && !req_uint(rq, key, true, INT64_MAX, &target))
		return NULL;
	struct pty *p = find_req(target);
	if (!p)
		reply_error(rq->id, "no_such_request", "%s: no terminal session attached as %lld",
			    rq->type, (long long)target);
	return p;
}

void handle_pty_input(const struct request *rq)
{
	const unsigned char *data = NULL;
	size_t n = 0;
	struct pty *p;
	if (!req_need_id(rq) || !(p = target_of(rq, NULL)) || !req_chunk(rq, "data", &data, &n))
		return;
	if (n > 0 && p->master >= 0 && !buffer_input(p, data, n)) {
		/* An error is the attachment's terminal: it ends, the session stays attachable. */
		reply_error(rq->id, "too_large", "pty_input: more than %d bytes waiting for the terminal",
			    INPUT_CAP);
		p->req = -1;
		return;
	}
	flush_input(p);
}

void handle_pty_resize(const struct request *rq)
{
	struct winsize ws;
	struct pty *p;
	if (!req_need_id(rq) || !(p = target_of(rq, "target")) || !read_size(rq, &ws))
		return;
	/* The kernel sends SIGWINCH to the foreground job. */
	if (p->master >= 0 && ioctl(p->master, TIOCSWINSZ, &ws) < 0)
		reply_errno(rq->id, errno, "pty_resize");
	else
		reply_ok(rq->id);
}

void handle_pty_signal(const struct request *rq)
{
	const char *name = NULL;
	struct pty *p;
	if (!req_need_id(rq) || !(p = target_of(rq, "target")) ||
	    !req_string(rq, "signal", true, &name))
		return;
	int sig = signal_number(name);
	if (sig < 0) {
		reply_error(rq->id, "bad_request", "pty_signal: unknown signal %s", name);
		return;
	}
	if (p->exited) {
		reply_ok(rq->id);
		return;
	}
	/* Where a key would send it: the terminal's foreground job, else the shell's group. */
	pid_t group = p->master >= 0 ? tcgetpgrp(p->master) : -1;
	if (group <= 0)
		group = p->pid;
	if (kill(-group, sig) < 0 && errno != ESRCH)
		reply_errno(rq->id, errno, "pty_signal %s", name);
	else
		reply_ok(rq->id);
}

void handle_pty_close(const struct request *rq)
{
	struct pty *p;
	if (!req_need_id(rq) || !(p = target_of(rq, "target")))
		return;
	hangup(p);
	reply_ok(rq->id);
}

void handle_pty_detach(const struct request *rq)
{
	struct pty *p;
	if (!req_need_id(rq) || !(p = target_of(rq, "target")))
		return;
	detach(p);
	reply_ok(rq->id);
}

/* ---- the loop's side ---- */

static void on_master(void *ctx, short revents)
{
	(void)revents;
	read_master(ctx);
}

static void on_writable(void *ctx, short revents)
{
	(void)revents;
	flush_input(ctx);
}

void pty_poll(struct pollset *ps)
{
	for (struct pty *p = ptys; p; p = p->next) {
		if (p->master < 0)
			continue;
		/* Backpressure only towards a host that watches; a detached one loses old output. */
		if (!(p->req >= 0 && out_full()))
			pollset_add(ps, p->master, POLLIN, on_master, p);
		if (p->in_off < p->in_len)
			pollset_add(ps, p->master, POLLOUT, on_writable, p);
		if (p->exited && !p->eof)
			pollset_wake_at(ps, p->exited_ms + EOF_GRACE_MS);
	}
}

void pty_reap(void)
{
	for (struct pty *p = ptys; p; p = p->next) {
		int status;
		if (!p->exited && waitpid(p->pid, &status, WNOHANG) == p->pid) {
			p->exited = true;
			p->status = status;
			p->exited_ms = now_ms();
		}
	}
}

static void report(struct pty *p)
{
	char buf[16];
	struct msg m;
	msg_begin(&m, "result", p->req);
	if (WIFSIGNALED(p->status)) {
		msg_null(&m, "exit_code");
		msg_str(&m, "signal", signal_name(WTERMSIG(p->status), buf, sizeof buf));
	} else {
		msg_int(&m, "exit_code", WEXITSTATUS(p->status));
		msg_null(&m, "signal");
	}
	msg_int(&m, "duration_ms", p->exited_ms - p->started_ms);
	msg_int(&m, "offset", (int64_t)p->total);
	msg_send(&m);
}

static void finish(struct pty *p, int64_t now)
{
	if (p->finished || !p->exited || (!p->eof && now < p->exited_ms + EOF_GRACE_MS))
		return;
	for (int i = 0; i < RING_CAP / SEND_CHUNK && read_master(p); i++)
		;
	close_master(p);
	p->finished = true;
}

void pty_tick(int64_t now)
{
	for (struct pty **pp = &ptys; *pp;) {
		struct pty *p = *pp;
		finish(p, now);
		bool gone = p->finished && (p->req >= 0 || p->discard);
		if (gone && p->req >= 0 && !out_full()) {
			send_pending(p);
			report(p);
		} else if (gone && !p->discard) {
			gone = false; /* wait for the host to catch up before the terminal message */
		}
		if (!gone) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		free_pty(p);
	}
}

void pty_session_end(void)
{
	for (struct pty *p = ptys; p; p = p->next)
		p->req = -1;
}

void pty_hangup_all(void)
{
	for (struct pty *p = ptys; p; p = p->next) {
		hangup(p);
		p->req = -1;
		p->discard = true;
	}
}
