/*
 * Syscall injection with ptrace (x86_64), as CRIU's compel does it: seize the thread,
 * interrupt it, save its registers, point it at a `syscall` instruction with the call's
 * number and arguments, step it through the call with PTRACE_SYSCALL, then restore. A call
 * the thread was blocked in is restarted the way the kernel itself would have.
 */
#include "inject.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define SYSCALL_STOP (SIGTRAP | 0x80)

int wait_traced(pid_t pid, int *status) {
  for (;;) {
    pid_t r = waitpid(pid, status, __WALL);
    if (r == pid) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
}

/* The kernel restarts a call interrupted by a stop only when a signal is handled on the way
 * out; a thread released by ptrace may not take that path, so restart it here instead. */
static void fix_restart(struct user_regs_struct *r) {
  if ((long)r->orig_rax < 0) return;
  switch ((long)(int)r->rax) {
  case -ERESTARTSYS:
  case -ERESTARTNOINTR:
  case -ERESTARTNOHAND:
    r->rax = r->orig_rax;
    r->rip -= 2;
    break;
  case -ERESTART_RESTARTBLOCK:
    r->rax = (uint64_t)-EINTR;
    break;
  }
  r->orig_rax = (uint64_t)-1;
}

/* Resume with `req` until a stop that is not a signal for the thread (those are held back
 * and delivered at release). Returns the wait status. */
static int step(struct tracee *t, int req, int *status) {
  if (ptrace(req, t->tid, 0, 0) < 0) return -1;
  for (;;) {
    if (wait_traced(t->tid, status) < 0) return -1;
    if (!WIFSTOPPED(*status)) {
      errno = ESRCH; /* the thread died under us */
      return -1;
    }
    int sig = WSTOPSIG(*status);
    if (sig == SYSCALL_STOP || (*status >> 16) != 0) return 0;
    t->pending_sig = sig;
    if (ptrace(req, t->tid, 0, 0) < 0) return -1;
  }
}

int tracee_hold(struct tracee *t, pid_t tid, uint64_t insn, int options) {
  memset(t, 0, sizeof *t);
  t->tid = tid;
  t->insn = insn;
  if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)(options | PTRACE_O_TRACESYSGOOD)) < 0)
    return -1;
  if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0) goto fail;
  int status;
  for (;;) {
    if (wait_traced(tid, &status) < 0) goto fail;
    if (!WIFSTOPPED(status)) {
      errno = ESRCH;
      return -1;
    }
    if ((status >> 16) == PTRACE_EVENT_STOP) break;
    /* A signal came first: hold it back, keep waiting for the interrupt's stop. */
    t->pending_sig = WSTOPSIG(status);
    if (ptrace(PTRACE_CONT, tid, 0, 0) < 0) goto fail;
  }
  if (ptrace(PTRACE_GETREGS, tid, 0, &t->saved) < 0) goto fail;
  fix_restart(&t->saved);
  return 0;
fail : {
  int e = errno;
  ptrace(PTRACE_DETACH, tid, 0, 0);
  errno = e;
  return -1;
}
}

int tracee_syscall(struct tracee *t, long nr, const uint64_t args[6], long *ret, pid_t *forked) {
  struct user_regs_struct r = t->saved;
  r.rip = t->insn;
  r.rax = (uint64_t)nr;
  r.orig_rax = (uint64_t)-1;
  r.rdi = args[0];
  r.rsi = args[1];
  r.rdx = args[2];
  r.r10 = args[3];
  r.r8 = args[4];
  r.r9 = args[5];
  if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) < 0) return -1;
  int status;
  if (step(t, PTRACE_SYSCALL, &status) < 0) return -1; /* entry */
  if (step(t, PTRACE_SYSCALL, &status) < 0) return -1; /* exit, or the fork event */
  if (forked && (status >> 16) == PTRACE_EVENT_FORK) {
    unsigned long child = 0;
    if (ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &child) < 0) return -1;
    *forked = (pid_t)child;
    if (step(t, PTRACE_SYSCALL, &status) < 0) return -1; /* exit */
  }
  if (ptrace(PTRACE_GETREGS, t->tid, 0, &r) < 0) return -1;
  *ret = (long)r.rax;
  return 0;
}

int tracee_release(struct tracee *t) {
  int rc = ptrace(PTRACE_SETREGS, t->tid, 0, &t->saved);
  int e = errno;
  if (ptrace(PTRACE_DETACH, t->tid, 0, (void *)(long)t->pending_sig) < 0 && rc == 0) return -1;
  errno = e;
  return rc;
}

uint64_t find_syscall_insn(pid_t pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *maps = fopen(path, "re");
  if (!maps) return 0;
  uint64_t start = 0, end = 0;
  while (fgets(line, sizeof line, maps)) {
    if (strstr(line, "[vdso]") && sscanf(line, "%lx-%lx", &start, &end) == 2) break;
    start = end = 0;
  }
  fclose(maps);
  if (!start || end - start > (1 << 16)) return 0;
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int mem = open(path, O_RDONLY | O_CLOEXEC);
  if (mem < 0) return 0;
  unsigned char buf[1 << 16];
  ssize_t n = pread(mem, buf, end - start, (off_t)start);
  close(mem);
  for (ssize_t i = 0; i + 1 < n; i++)
    if (buf[i] == 0x0f && buf[i + 1] == 0x05) return start + (uint64_t)i;
  return 0;
}
