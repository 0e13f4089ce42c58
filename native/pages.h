/*
 * Guest-RAM pages of a process: walk /proc/PID/pagemap over a mapping and copy the pages
 * the process wrote (its private, anonymous pages) into a file at their RAM offsets.
 */
#ifndef FORKD_PAGES_H
#define FORKD_PAGES_H

#include <stdint.h>
#include <sys/types.h>

#define PAGE ((uint64_t)4096)
#define CHUNK ((uint64_t)2 << 20)

struct region {
  pid_t pid;
  uint64_t vstart, vend, fileoff;
};

struct copy_stats {
  uint64_t pages, runs;
};

void die(const char *what);
double now_ms(void);
uint64_t parse_u64(const char *s);
struct region parse_region(char **argv);

struct copy_opts {
  /* Sleep before each 2 MiB (fault-injection knob for tests). */
  unsigned throttle_ms;
  /* The pages are shared copy-on-write with another process (a frozen fork's): read them
   * without pinning, which would copy each one (pages.c). */
  int shared;
};

/* Copy `r`'s private pages into `dst` (an open fd). Returns 0, or -1 with errno set. */
int copy_private_pages(const struct region *r, int dst, const struct copy_opts *o,
                       struct copy_stats *s);

#endif
