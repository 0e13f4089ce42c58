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

/* Copy `r`'s private pages into `dst` (an open fd); `throttle_ms` sleeps before each 2 MiB
 * (fault-injection knob for tests). Returns 0, or -1 with errno set. */
int copy_private_pages(const struct region *r, int dst, unsigned throttle_ms, struct copy_stats *s);

#endif
