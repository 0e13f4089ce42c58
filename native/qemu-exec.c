/*
 * forkd-qemu-exec: start QEMU with its memory open to KSM (docs/idle.md "Merging
 * identical pages"). Node cannot call prctl() between fork and exec, so the daemon
 * starts QEMU through this: it sets PR_SET_MEMORY_MERGE (kernel >= 6.4, inherited across
 * exec since 6.7), so every anonymous and private mapping QEMU makes is mergeable, and with
 * --same-layout also personality(ADDR_NO_RANDOMIZE), so QEMU's own heap and relocated
 * data sit at the same addresses in every child and become byte-identical across them.
 * Then it execs QEMU in place (same pid: the daemon's pid checks and pidfile still hold).
 *
 * Usage: forkd-qemu-exec [--same-layout] -- QEMU [ARGS...]
 * Built static so it runs in any namespace QEMU runs in.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#endif

int main(int argc, char **argv) {
  int i = 1, same_layout = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--same-layout") == 0) {
      same_layout = 1;
    } else {
      fprintf(stderr, "forkd-qemu-exec: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    fprintf(stderr, "usage: forkd-qemu-exec [--same-layout] -- QEMU [ARGS...]\n");
    return 2;
  }
  if (prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) != 0) {
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
