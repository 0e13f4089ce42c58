/*
 * forkd-qemu-exec: start QEMU with process settings Node cannot make between fork and
 * exec (docs/idle.md "Leaner children"), then exec QEMU in place (same pid: the daemon's
 * pid checks and pidfile still hold).
 *  --no-thp: PR_SET_THP_DISABLE (kept across exec): QEMU's translation buffer asks for
 *    huge pages, and an idle child's few MiB of code would hold whole 2 MiB pages.
 *  --merge: PR_SET_MEMORY_MERGE (kernel >= 6.4, inherited across exec since 6.7), so every
 *    anonymous and private mapping QEMU makes is open to KSM.
 *  --same-layout: --merge, and personality(ADDR_NO_RANDOMIZE), so QEMU's own heap and
 *    relocated data sit at the same addresses in every child and become byte-identical.
 *
 * Usage: forkd-qemu-exec [--merge] [--same-layout] [--no-thp] -- QEMU [ARGS...]
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
  int i = 1, same_layout = 0, merge = 0, no_thp = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--same-layout") == 0) {
      same_layout = merge = 1;
    } else if (strcmp(argv[i], "--merge") == 0) {
      merge = 1;
    } else if (strcmp(argv[i], "--no-thp") == 0) {
      no_thp = 1;
    } else {
      fprintf(stderr, "forkd-qemu-exec: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    fprintf(stderr, "usage: forkd-qemu-exec [--merge] [--same-layout] [--no-thp] -- QEMU [ARGS...]\n");
    return 2;
  }
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
