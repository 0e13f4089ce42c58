/* exec.c — the exec family: spawn a command in its own session, stream its stdout/stderr,
 * feed its stdin from a buffer, signal it, kill it at its timeout, report its exit. Nothing
 * here blocks the loop on a child: pipes are non-blocking, and execs of an old session keep
 * being drained (output discarded) so no child ever waits forever on a full pipe. */
#include "agent.h"
#include "env.h"
#include "handlers.h"
#include "log.h"
#include "msg.h"
#include "out.h"
#include "user.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
/* The agent raises its own fd limit; children get the one it started with. */
static struct rlimit child_nofile;
static char read_buf[READ_CHUNK];

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},     {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL},
	{"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},   {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},
	{"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1},   {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
	{"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM},   {"SIGTERM", SIGTERM}, {"SIGSTKFLT", SIGSTKFLT},
	{"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT},   {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP},
	{"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU},   {"SIGURG", SIGURG},   {"SIGXCPU", SIGXCPU},
	{"SIGXFSZ", SIGXFSZ}, {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
	{"SIGIO", SIGIO},     {"SIGPWR", SIGPWR},     {"SIGSYS", SIGSYS},
};

int signal_number(const char *name)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcmp(signals[i].name, name) == 0)
			return signals[i].sig;
	return -1;
}

const char *signal_name(int sig, char *buf, size_t len)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (signals[i].sig == sig)
			return signals[i].name;
	snprintf(buf, len, "SIG%d", sig);
	return buf;
}

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

/* ---- the request ---- */

struct spec {
	const char *argv[MAX_LIST + 1];
	struct env env;
	const char *cwd, *user;
	char user_buf[24];
	bool want_stdin;
	int64_t timeout_ms;
};

static bool read_argv(const struct request *rq, struct spec *s)
{
	const struct json *a = req_field(rq, "argv");
	if (!a || a->type != JSON_ARRAY || a->u.kids.count == 0) {
		reply_error(rq->id, "bad_request", "exec: \"argv\" must be a non-empty array of strings");
		return false;
	}
	if (a->u.kids.count > MAX_LIST) {
		reply_error(rq->id, "too_large", "exec: more than %d argv entries", MAX_LIST);
		return false;
	}
	size_t i = 0;
	for (const struct json *v = a->u.kids.first; v; v = v->next) {
		if (v->type != JSON_STRING || memchr(v->u.str.s, 0, v->u.str.len) ||
		    (i == 0 && v->u.str.len == 0)) {
			reply_error(rq->id, "bad_request", "exec: argv[%zu] must be a string without NUL", i);
			return false;
		}
		s->argv[i++] = v->u.str.s;
	}
	s->argv[i] = NULL;
	return true;
}

/* Request env on top of what is already in s->env; a null value removes a key. */
static bool read_env(const struct request *rq, struct spec *s)
{
	const struct json *env = req_field(rq, "env");
	if (!env)
		return true;
	if (env->type != JSON_OBJECT) {
		reply_error(rq->id, "bad_request", "exec: \"env\" must be an object of strings");
		return false;
	}
	if (env->u.kids.count > MAX_LIST) {
		reply_error(rq->id, "too_large", "exec: more than %d env entries", MAX_LIST);
		return false;
	}
	for (const struct json *kv = env->u.kids.first; kv; kv = kv->next) {
		bool str_ok = kv->type == JSON_STRING && !memchr(kv->u.str.s, 0, kv->u.str.len);
		if (!env_key_ok(kv->key, kv->key_len) || !(str_ok || kv->type == JSON_NULL)) {
			reply_error(rq->id, "bad_request", "exec: env \"%s\" must map to a string", kv->key);
			return false;
		}
		if (kv->type == JSON_NULL)
			env_unset(&s->env, kv->key, kv->key_len);
		else if (!env_set(&s->env, kv->key, kv->key_len, kv->u.str.s)) {
			reply_error(rq->id, "io", "exec: out of memory");
			return false;
		}
	}
	return true;
}

static bool read_user(const struct request *rq, struct spec *s)
{
	const struct json *u = req_field(rq, "user");
	int64_t uid;
	if (u && json_int(u, &uid) && uid >= 0 && uid <= 0xFFFFFFFE) {
		snprintf(s->user_buf, sizeof s->user_buf, "%lld", (long long)uid);
		s->user = s->user_buf;
		return true;
	}
	return req_string(rq, "user", false, &s->user);
}

static bool read_spec(const struct request *rq, struct spec *s)
{
	s->cwd = s->user = NULL;
	s->want_stdin = false;
	s->timeout_ms = 0;
	return read_argv(rq, s) && req_string(rq, "cwd", false, &s->cwd) && read_user(rq, s) &&
	       req_bool(rq, "stdin", &s->want_stdin) &&
	       req_uint(rq, "timeout_ms", false, INT64_MAX / 2, &s->timeout_ms);
}

/* ---- spawning ---- */

/* Everything the child needs, prepared before fork(): after it, only system calls. */
struct launch {
	char *const *argv;
	char *const *envp;
	char **paths; /* candidates for argv[0], in PATH order */
	const char *cwd;
	bool switch_user;
	struct user user;
	int in, out, err; /* the child's ends */
	int report;       /* CLOEXEC pipe: silent on success, a struct failure otherwise */
	bool ctty;        /* fd 0 is a terminal slave: make it the session's controlling tty */
	struct rlimit nofile;
};

enum stage { STAGE_USER = 1, STAGE_CWD, STAGE_EXEC, STAGE_SETUP };

struct failure {
	int stage;
	int err;
};

/* argv[0] as is when it has a slash, else each PATH entry joined with it. */
static char **candidates(const char *file, const char *path)
{
	if (strchr(file, '/')) {
		char **c = calloc(2, sizeof *c);
		if (c && !(c[0] = strdup(file))) {
			free(c);
			return NULL;
		}
		return c;
	}
	size_t n = 1;
	for (const char *p = path; *p; p++)
		n += *p == ':';
	char **c = calloc(n + 1, sizeof *c);
	if (!c)
		return NULL;
	size_t i = 0;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dlen = (size_t)(end - p);
		char *full = malloc(dlen + strlen(file) + 3);
		if (full) {
			/* An empty entry means the current directory, as in execvp. */
			snprintf(full, dlen + strlen(file) + 3, "%.*s/%s", (int)(dlen ? dlen : 1),
				 dlen ? p : ".", file);
			c[i++] = full;
		}
		if (!*end)
			break;
		p = end;
	}
	return c;
}

static void free_candidates(char **c)
{
	for (size_t i = 0; c && c[i]; i++)
		free(c[i]);
	free(c);
}

static void __attribute__((noreturn)) child_fail(int report, int stage, int err)
{
	struct failure f = {stage, err};
	ssize_t w = write(report, &f, sizeof f);
	(void)w;
	_exit(127);
}

static void __attribute__((noreturn)) child_run(const struct launch *l)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigaction(SIGPIPE, &dfl, NULL); /* ignored dispositions survive exec */
	setrlimit(RLIMIT_NOFILE, &l->nofile);
	if (setsid() < 0 || dup2(l->in, 0) < 0 || dup2(l->out, 1) < 0 || dup2(l->err, 2) < 0)
		child_fail(l->report, STAGE_SETUP, errno);
	if (l->ctty && ioctl(0, TIOCSCTTY, 0) < 0)
		child_fail(l->report, STAGE_SETUP, errno);
	if (l->switch_user &&
	    (setgroups((size_t)l->user.ngroups, l->user.groups) < 0 || setgid(l->user.gid) < 0 ||
	     setuid(l->user.uid) < 0))
		child_fail(l->report, STAGE_USER, errno);
	if (chdir(l->cwd) < 0)
		child_fail(l->report, STAGE_CWD, errno);
	/* execvp's rules: EACCES on one entry is remembered, ENOENT/ENOTDIR move on. */
	int err = ENOENT;
	bool eacces = false;
	for (char **p = l->paths; *p; p++) {
		execve(*p, l->argv, l->envp);
		err = errno;
		if (err == EACCES)
			eacces = true;
		else if (err != ENOENT && err != ENOTDIR)
			break;
	}
	if (eacces && (err == ENOENT || err == ENOTDIR))
		err = EACCES;
	child_fail(l->report, STAGE_EXEC, err);
}

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

/* Forks and waits for the child to exec (report pipe closes) or to fail (a struct arrives). */
static pid_t spawn(struct launch *l, struct failure *f)
{
	int report[2];
	if (pipe2(report, O_CLOEXEC) < 0) {
		*f = (struct failure){STAGE_SETUP, errno};
		return -1;
	}
	l->report = report[1];
	pid_t pid = fork();
	if (pid == 0)
		child_run(l);
	close(report[1]);
	if (pid < 0) {
		*f = (struct failure){STAGE_SETUP, errno};
		close(report[0]);
		return -1;
	}
	ssize_t n;
	do
		n = read(report[0], f, sizeof *f);
	while (n < 0 && errno == EINTR);
	close(report[0]);
	/* A failed child is reaped by exec_reap() like any other zombie. */
	return n == (ssize_t)sizeof *f ? -1 : pid;
}

static void reply_failure(int64_t id, const struct spec *s, const struct failure *f)
{
	switch (f->stage) {
	case STAGE_USER:
		reply_errno_field(id, f->err, "user", "exec: switch to user %s",
				  s->user ? s->user : "(self)");
		break;
	case STAGE_CWD:
		reply_errno_field(id, f->err, "cwd", "exec: cwd %s", s->cwd);
		break;
	case STAGE_EXEC:
		reply_errno_field(id, f->err, "argv", "exec: %s", s->argv[0]);
		break;
	default:
		reply_errno(id, f->err, "exec: start %s", s->argv[0]);
	}
}

static bool is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
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
	pid_t pid = spawn(l, &f);
	close_all(fds, 3);
	if (pid < 0) {
		close_all(fds + 3, 3);
		free(e);
		reply_failure(rq->id, s, &f);
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

static bool prepare(const struct request *rq, struct spec *s, struct launch *l)
{
	int err = user_lookup(s->user, &l->user);
	if (err) {
		reply_error_field(rq->id, err == ENOENT ? "not_found" : "io", "user",
				  "exec: no user %s in /etc/passwd", s->user);
		return false;
	}
	l->switch_user = l->user.uid != geteuid() || (s->user && l->user.gid != getegid());
	if (!env_set(&s->env, "HOME", 4, l->user.home) || !env_merge(&s->env, env_defaults()) ||
	    !read_env(rq, s))
		return env_free(&s->env), false;
	const char *path = env_get(&s->env, "PATH");
	l->paths = candidates(s->argv[0], path ? path : DEFAULT_PATH);
	if (!l->paths) {
		reply_errno(rq->id, ENOMEM, "exec");
		return env_free(&s->env), false;
	}
	if (!s->cwd)
		s->cwd = is_dir(l->user.home) ? l->user.home : "/";
	static char *empty_env[] = {NULL};
	l->argv = (char *const *)s->argv;
	l->envp = s->env.n ? s->env.kv : empty_env;
	l->cwd = s->cwd;
	l->nofile = child_nofile;
	return true;
}

void handle_exec(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	static struct spec s; /* argv alone is 32 KiB: keep it off the stack */
	memset(&s, 0, sizeof s);
	if (!read_spec(rq, &s))
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
	if (!prepare(rq, &s, &l))
		return;
	start(rq, &s, &l);
	free_candidates(l.paths);
	env_free(&s.env);
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

void exec_init(void)
{
	getrlimit(RLIMIT_NOFILE, &child_nofile);
	struct rlimit more = child_nofile;
	more.rlim_cur = more.rlim_max < 8192 ? more.rlim_max : 8192;
	if (more.rlim_cur > child_nofile.rlim_cur)
		setrlimit(RLIMIT_NOFILE, &more);
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

/* ---- for other families (pty.c): the same argv, env, user, cwd and PATH rules ---- */

pid_t exec_spawn_on(const struct request *rq, int fd, bool ctty)
{
	static struct spec s;
	memset(&s, 0, sizeof s);
	if (!read_spec(rq, &s))
		return -1;
	struct launch l = {0};
	if (!prepare(rq, &s, &l))
		return -1;
	l.in = l.out = l.err = fd;
	l.ctty = ctty;
	struct failure f;
	pid_t pid = spawn(&l, &f);
	if (pid < 0)
		reply_failure(rq->id, &s, &f);
	free_candidates(l.paths);
	env_free(&s.env);
	return pid;
}
