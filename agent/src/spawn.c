/* spawn.c — starting a command with the exec rules: argv, env on top of the defaults, the
 * user from /etc/passwd, cwd (default: the user's home), PATH lookup as execvp does it, its
 * own session. Everything the child needs is prepared before fork(); after it, only system
 * calls, and a CLOEXEC pipe tells the parent which step failed. */
#include "spawn.h"

#include "msg.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The agent raises its own fd limit; children get the one it started with. */
static struct rlimit child_nofile;

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

bool spawn_read_spec(const struct request *rq, struct spec *s)
{
	s->cwd = s->user = NULL;
	s->want_stdin = false;
	s->timeout_ms = 0;
	return read_argv(rq, s) && req_string(rq, "cwd", false, &s->cwd) && read_user(rq, s) &&
	       req_bool(rq, "stdin", &s->want_stdin) &&
	       req_uint(rq, "timeout_ms", false, INT64_MAX / 2, &s->timeout_ms);
}

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

/* Forks and waits for the child to exec (report pipe closes) or to fail (a struct arrives). */
pid_t spawn_start(struct launch *l, struct failure *f)
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

void spawn_reply_failure(int64_t id, const struct spec *s, const struct failure *f)
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

bool spawn_prepare(const struct request *rq, struct spec *s, struct launch *l)
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

void spawn_init(void)
{
	getrlimit(RLIMIT_NOFILE, &child_nofile);
	struct rlimit more = child_nofile;
	more.rlim_cur = more.rlim_max < 8192 ? more.rlim_max : 8192;
	if (more.rlim_cur > child_nofile.rlim_cur)
		setrlimit(RLIMIT_NOFILE, &more);
}

/* For other families (pty.c): the same rules, with one fd as stdin, stdout and stderr. */
pid_t spawn_on_fd(const struct request *rq, int fd, bool ctty)
{
	static struct spec s;
	memset(&s, 0, sizeof s);
	if (!spawn_read_spec(rq, &s))
		return -1;
	struct launch l = {0};
	if (!spawn_prepare(rq, &s, &l))
		return -1;
	l.in = l.out = l.err = fd;
	l.ctty = ctty;
	struct failure f;
	pid_t pid = spawn_start(&l, &f);
	if (pid < 0)
		spawn_reply_failure(rq->id, &s, &f);
	spawn_free(&s, &l);
	return pid;
}

void spawn_free(struct spec *s, struct launch *l)
{
	free_candidates(l->paths);
	l->paths = NULL;
	env_free(&s->env);
}
