/*
 * Syscall injection into a thread of another process with ptrace (x86_64): the live
 * branch makes a stopped QEMU fork so that the kernel's copy-on-write freezes its RAM.
 */
#ifndef FORKD_INJECT_H
#define FORKD_INJECT_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct tracee {
  pid_t tid;
  /* The thread's registers when it was stopped, fixed up to restart an interrupted call. */
  struct user_regs_struct saved;
  /* A signal that arrived while the thread was held: delivered when it is released. */
  int pending_sig;
  /* Address of a `syscall` instruction in the process that the injection executes. */
  uint64_t insn;
};

/* Seize and stop thread `tid`; `insn` is where injected syscalls execute. -1 + errno. */
int tracee_hold(struct tracee *t, pid_t tid, uint64_t insn, int options);

/* Run one syscall in the held thread; its result (or -errno) lands in *ret. With `forked`
 * set, the syscall is expected to fork and the new (traced, stopped) child's pid is stored.
 * Returns -1 with errno set when the thread cannot be driven (it died, ptrace failed). */
int tracee_syscall(struct tracee *t, long nr, const uint64_t args[6], long *ret, pid_t *forked);

/* Restore the registers and let the thread go on as if nothing happened. errno is left
 * as it was unless this fails (callers keep the errno of what failed before). */
int tracee_release(struct tracee *t);

/* The address of a `syscall` instruction (0f 05) in PID's vDSO, 0 if none. */
uint64_t find_syscall_insn(pid_t pid);

/* Wait for a traced process to stop or end, passing signal stops through. */
int wait_traced(pid_t pid, int *status);

#endif
