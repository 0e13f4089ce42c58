/* spawn.h — what a request to start a command becomes (struct spec), what the child needs
 * prepared before fork() (struct launch), and how a start that failed is told to the host.
 * Shared by the exec family (exec.c: pipes) and spawn_on_fd (a terminal). */
#ifndef FORKD_SPAWN_H
#define FORKD_SPAWN_H

#include "agent.h"
#include "env.h"
#include "handlers.h"
#include "user.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

struct spec {
	const char *argv[MAX_LIST + 1];
	struct env env;
	const char *cwd, *user;
	char user_buf[24];
	bool want_stdin;
	int64_t timeout_ms;
};

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

/* Reads argv, cwd, user, stdin and timeout_ms; false once it replied. */
bool spawn_read_spec(const struct request *rq, struct spec *s);
/* Looks the user up, builds env and the PATH candidates; false once it replied. On true,
 * spawn_free releases what it allocated. */
bool spawn_prepare(const struct request *rq, struct spec *s, struct launch *l);
/* Forks and waits until the child has exec'd (its pid) or failed (-1, *f says where). */
pid_t spawn_start(struct launch *l, struct failure *f);
void spawn_reply_failure(int64_t id, const struct spec *s, const struct failure *f);
void spawn_free(struct spec *s, struct launch *l);

#endif
