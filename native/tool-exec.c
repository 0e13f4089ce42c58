/*
 * forkd-tool-exec: run a host tool (tar, zstd, mkfs.ext4, debugfs, debootstrap…) so that
 * it, and everything it starts, dies with the daemon. A daemon SIGKILLed mid-build or
 * mid-push would otherwise leave its tools running as orphans, writing into staging and
 * work dirs its restart sweeps. Node cannot call prctl() between fork and exec, so the
 * daemon starts each tool through this: it asks for SIGTERM when the daemon dies
 * (PR_SET_PDEATHSIG, which fires even when the daemon is SIGKILLed), runs the tool in a
 * process group of its own (a tool's own children, like tar's zstd, included), and on that
 * signal, or on one the daemon sends (a timeout), kills the whole group with SIGKILL. The
 * tool itself dies by SIGKILL if this process does (its own PR_SET_PDEATHSIG). It exits
 * as the tool did (the same code, or the same signal), so the daemon sees the tool's
 * outcome. A tool it cannot exec: exit 127 with "forkd-tool-exec: TOOL: not found".
 *
 * Usage: forkd-tool-exec PARENT-PID TOOL [ARGS...]  (PARENT-PID: the daemon, checked after
 * the prctl so a daemon that died before it runs nothing).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP};
static volatile sig_atomic_t got;
static volatile pid_t group;

static void on_signal(int sig) {
  got = sig;
  if (group > 0) killpg(group, SIGKILL); /* async-signal-safe */
}

/* Die the way the tool did (or by the signal this process was sent). */
static int die_by(int sig) {
  signal(sig, SIG_DFL);
  raise(sig);
  return 128 + sig; /* a signal that does not end a process */
}

static void run_tool(pid_t wrapper, char **argv) {
  for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) signal(forwarded[i], SIG_DFL);
  setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != wrapper) _exit(128 + SIGKILL);
  execvp(argv[0], argv);
  fprintf(stderr, "forkd-tool-exec: %s: %s\n", argv[0],
          errno == ENOENT ? "not found" : strerror(errno));
  _exit(127);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: forkd-tool-exec PARENT-PID TOOL [ARGS...]\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns EINTR */
  for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
    sigaction(forwarded[i], &sa, NULL);
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
    fprintf(stderr, "forkd-tool-exec: PR_SET_PDEATHSIG: %s\n", strerror(errno));
    return 1;
  }
  if (getppid() != (pid_t)atol(argv[1])) return die_by(SIGTERM); /* the daemon is gone */
  pid_t self = getpid();
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "forkd-tool-exec: fork: %s\n", strerror(errno));
    return 1;
  }
  if (child == 0) run_tool(self, &argv[2]);
  setpgid(child, child); /* also here: the group exists before any kill below */
  group = child;
  if (got) killpg(child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "forkd-tool-exec: waitpid: %s\n", strerror(errno));
      return 1;
    }
  }
  if (got) {
    killpg(child, SIGKILL); /* what the tool started and left behind */
    return die_by(got);
  }
  if (WIFSIGNALED(status)) return die_by(WTERMSIG(status));
  return WEXITSTATUS(status);
}
