/*
 * The pagemap walk and the private-page copy shared by `pages` (stop-and-copy) and `live`
 * (copy from a frozen fork). Reads pagemap in large batches; copies runs of private pages
 * 2 MiB at a time: with process_vm_readv from a process whose pages are its own, through
 * /proc/PID/mem from a frozen fork whose pages it shares copy-on-write with the VMM.
 *
 * Why two ways: process_vm_readv pins the pages it reads (FOLL_PIN), and since Linux 5.19 a
 * read-only pin of an anonymous page that is shared copy-on-write first unshares it, i.e.
 * copies it into the pinned process. Read that way, the frozen fork duplicated every page
 * it was read for, charged to the sandbox's memory cgroup (+218 MiB for a guest that wrote
 * 214 MiB, and the kernel killed the VMM at its limit). /proc/PID/mem takes references
 * without a pin (FOLL_GET) and leaves shared pages shared.
 */
#include "pages.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PM_PRESENT (1ULL << 63)
#define PM_SWAPPED (1ULL << 62)
#define PM_FILE (1ULL << 61)
#define PM_BATCH 65536 /* pagemap entries read per pread: 256 MiB of address space */

void die(const char *what) {
  fprintf(stderr, "forkd-capture: %s: %s\n", what, strerror(errno));
  exit(1);
}

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

uint64_t parse_u64(const char *s) {
  char *end;
  errno = 0;
  uint64_t v = strtoull(s, &end, 0);
  if (errno || *end) {
    fprintf(stderr, "forkd-capture: not a number: %s\n", s);
    exit(2);
  }
  return v;
}

struct region parse_region(char **argv) {
  struct region r = {(pid_t)parse_u64(argv[0]), parse_u64(argv[1]), parse_u64(argv[2]),
                     parse_u64(argv[3])};
  if (r.vend <= r.vstart || r.vstart % PAGE || r.vend % PAGE) {
    fprintf(stderr, "forkd-capture: bad range\n");
    exit(2);
  }
  return r;
}

static int write_all_at(int fd, const char *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pwrite(fd, buf, len, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += n;
    len -= (size_t)n;
    off += n;
  }
  return 0;
}

static int is_private(uint64_t e) { return (e & (PM_PRESENT | PM_SWAPPED)) && !(e & PM_FILE); }

struct copier {
  const struct region *r;
  int out;
  unsigned throttle_ms;
  char *buf;
  int mem; /* /proc/PID/mem for a shared source, -1 to use process_vm_readv */
};

static ssize_t read_pages(struct copier *c, uint64_t va, uint64_t n) {
  if (c->mem >= 0) {
    for (uint64_t done = 0; done < n;) {
      ssize_t got = pread(c->mem, c->buf + done, n - done, (off_t)(va + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return got < 0 ? -1 : (ssize_t)done;
      done += (uint64_t)got;
    }
    return (ssize_t)n;
  }
  struct iovec local = {c->buf, n}, remote = {(void *)(uintptr_t)va, n};
  return process_vm_readv(c->r->pid, &local, 1, &remote, 1, 0);
}

static int copy_run(struct copier *c, uint64_t va, uint64_t npages) {
  uint64_t len = npages * PAGE;
  for (uint64_t done = 0; done < len;) {
    uint64_t n = len - done < CHUNK ? len - done : CHUNK;
    if (c->throttle_ms) usleep(c->throttle_ms * 1000);
    ssize_t got = read_pages(c, va + done, n);
    if (got < 0) return -1;
    if ((uint64_t)got != n) {
      errno = EIO;
      return -1;
    }
    if (write_all_at(c->out, c->buf, n, (off_t)(c->r->fileoff + (va + done - c->r->vstart))) < 0)
      return -1;
    done += n;
  }
  return 0;
}

int copy_private_pages(const struct region *r, int dst, const struct copy_opts *o,
                       struct copy_stats *s) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", (int)r->pid);
  int pm = open(path, O_RDONLY | O_CLOEXEC);
  if (pm < 0) return -1;
  int mem = -1;
  if (o->shared) {
    snprintf(path, sizeof path, "/proc/%d/mem", (int)r->pid);
    mem = open(path, O_RDONLY | O_CLOEXEC);
    if (mem < 0) {
      close(pm);
      return -1;
    }
  }
  static uint64_t entries[PM_BATCH];
  struct copier c = {r, dst, o->throttle_ms, malloc(CHUNK), mem};
  int rc = c.buf ? 0 : -1;
  uint64_t run_start = 0, run_len = 0;
  memset(s, 0, sizeof *s);
  for (uint64_t va = r->vstart; rc == 0 && va < r->vend;) {
    uint64_t n = (r->vend - va) / PAGE;
    if (n > PM_BATCH) n = PM_BATCH;
    ssize_t got = pread(pm, entries, n * 8, (off_t)(va / PAGE * 8));
    if (got <= 0) {
      if (got == 0) errno = EIO;
      rc = -1;
      break;
    }
    n = (uint64_t)got / 8;
    for (uint64_t i = 0; rc == 0 && i < n; i++, va += PAGE) {
      if (is_private(entries[i])) {
        if (run_len == 0) run_start = va;
        run_len++;
        s->pages++;
      } else if (run_len) {
        rc = copy_run(&c, run_start, run_len);
        s->runs++;
        run_len = 0;
      }
    }
  }
  if (rc == 0 && run_len) {
    rc = copy_run(&c, run_start, run_len);
    s->runs++;
  }
  int e = errno;
  free(c.buf);
  close(pm);
  if (mem >= 0) close(mem);
  errno = e;
  return rc;
}
