/*
 * forkd-qemu-exec: start QEMU with process settings Node cannot make between fork and
 * exec (docs/idle.md "Leaner children", docs/security.md "QEMU jailed"), then exec QEMU
 * in place (same pid: the daemon's pid checks, pidfile, ptrace and signals still hold).
 *  --no-thp: PR_SET_THP_DISABLE (kept across exec): QEMU's translation buffer asks for
 *    huge pages, and an idle child's few MiB of code would hold whole 2 MiB pages.
 *  --merge: PR_SET_MEMORY_MERGE (kernel >= 6.4, inherited across exec since 6.7), so every
 *    anonymous and private mapping QEMU makes is open to KSM.
 *  --same-layout: --merge, and personality(ADDR_NO_RANDOMIZE), so QEMU's own heap and
 *    relocated data sit at the same addresses in every child and become byte-identical.
 *  --jail: a mount and an IPC namespace of its own whose root holds only what the VM
 *    needs (jail.c): the paths of --rw PATH (read-write), --ro PATH (read-only) and
 *    --chain DISK (the disk's qcow2 backing chain, read-only), each at its host path.
 *
 * Usage: forkd-qemu-exec [--merge] [--same-layout] [--no-thp]
 *                        [--jail [--rw PATH] [--ro PATH] [--chain DISK]...] -- QEMU [ARGS...]
 * Built static so it runs in any namespace QEMU runs in.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "jail.h"

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#endif

static const char *const usage =
    "usage: forkd-qemu-exec [--merge] [--same-layout] [--no-thp] [--jail [--rw PATH] [--ro PATH] "
    "[--chain DISK]...] -- QEMU [ARGS...]\n";

int main(int argc, char **argv) {
  int i = 1, same_layout = 0, merge = 0, no_thp = 0, jailed = 0;
  static struct jail jail;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--same-layout") == 0) {
      same_layout = merge = 1;
    } else if (strcmp(argv[i], "--merge") == 0) {
      merge = 1;
    } else if (strcmp(argv[i], "--no-thp") == 0) {
      no_thp = 1;
    } else if (strcmp(argv[i], "--jail") == 0) {
      jailed = 1;
    } else if (i + 1 < argc && jail_add(&jail, argv[i], argv[i + 1]) == 0) {
      i++;
    } else {
      fprintf(stderr, "forkd-qemu-exec: unknown option (or too many paths) %s\n%s", argv[i], usage);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    fputs(usage, stderr);
    return 2;
  }
  if (jailed && jail_enter(&jail, argv[i + 1]) != 0) return 1;
  if (no_thp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
    fprintf(stderr, "forkd-qemu-exec: PR_SET_THP_DISABLE: %s\n", strerror(errno));
    return 1;
  }
  if (merge && prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) != 0) {
    fprintf(stderr, "forkd-qemu-exec: PR_SET_MEMORY_MERGE: %s\n", strerror(errno));
    return 1;
  }
  if (same_layout && personality(ADDR_NO_RANDOMIZE) == -1) {
    fprintf(stderr, "forkd-qemu-exec: personality: %s\n", strerror(errno));
    return 1;
  }
  execvp(argv[i + 1], &argv[i + 1]);
  fprintf(stderr, "forkd-qemu-exec: %s: %s\n", argv[i + 1], strerror(errno));
  return 127;
}
