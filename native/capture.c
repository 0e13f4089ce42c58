/*
 * forkd-capture: the memory half of a capture (DESIGN.md "Memory"), run by the host.
 *
 *   forkd-capture sparse-copy SRC DST
 *       copy SRC to DST keeping holes (SEEK_DATA/SEEK_HOLE + copy_file_range); SRC may be
 *       /dev/zero-like (size 0 or a char device): DST is then an empty file of --size bytes
 *   forkd-capture pages PID VSTART VEND FILEOFF DST
 *       copy the pages of PID's mapping [VSTART,VEND) that the process wrote (its private,
 *       anonymous pages per /proc/PID/pagemap) into DST at FILEOFF + (va - VSTART)
 *   forkd-capture compare PID VSTART VEND FILEOFF FILE
 *       read the whole mapping through /proc/PID/mem and count 4 KiB pages that differ
 *       from FILE (the verification the design requires of any capture method)
 *
 * Every command prints one JSON line of results on stdout; errors go to stderr, exit 1.
 * The pause of a branch is the `pages` command, so it reads pagemap in large batches and
 * copies runs of private pages with one process_vm_readv per 2 MiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE ((uint64_t)4096)
#define CHUNK ((uint64_t)2 << 20)
#define PM_PRESENT (1ULL << 63)
#define PM_SWAPPED (1ULL << 62)
#define PM_FILE (1ULL << 61)
#define PM_BATCH 65536 /* pagemap entries read per pread: 256 MiB of address space */

static void die(const char *what) {
  fprintf(stderr, "forkd-capture: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t parse_u64(const char *s) {
  char *end;
  errno = 0;
  uint64_t v = strtoull(s, &end, 0);
  if (errno || *end) {
    fprintf(stderr, "forkd-capture: not a number: %s\n", s);
    exit(2);
  }
  return v;
}

static void write_all_at(int fd, const char *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pwrite(fd, buf, len, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("pwrite");
    }
    buf += n;
    len -= (size_t)n;
    off += n;
  }
}

/* ---- sparse-copy ---------------------------------------------------------------------- */

static int sparse_copy(const char *src, const char *dst, uint64_t size_hint) {
  double t0 = now_ms();
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) die(src);
  struct stat st;
  if (fstat(in, &st) < 0) die("fstat");
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) die(dst);
  uint64_t size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : size_hint;
  if (ftruncate(out, (off_t)size) < 0) die("ftruncate");
  uint64_t copied = 0;
  if (S_ISREG(st.st_mode)) {
    off_t pos = 0;
    for (;;) {
      off_t data = lseek(in, pos, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;
        die("SEEK_DATA");
      }
      off_t hole = lseek(in, data, SEEK_HOLE);
      if (hole < 0) die("SEEK_HOLE");
      off_t ioff = data, ooff = data;
      while (ioff < hole) {
        ssize_t n = copy_file_range(in, &ioff, out, &ooff, (size_t)(hole - ioff), 0);
        if (n < 0) die("copy_file_range");
        if (n == 0) break;
        copied += (uint64_t)n;
      }
      pos = hole;
    }
  }
  if (fsync(out) < 0 && errno != EINVAL) die("fsync");
  close(in);
  close(out);
  printf("{\"size\":%" PRIu64 ",\"copied\":%" PRIu64 ",\"ms\":%.2f}\n", size, copied, now_ms() - t0);
  return 0;
}

/* ---- pagemap walk --------------------------------------------------------------------- */

struct region {
  pid_t pid;
  uint64_t vstart, vend, fileoff;
};

/* Calls run(start_va, npages) for every maximal run of pages for which want(entry) holds. */
typedef void (*run_fn)(const struct region *r, uint64_t va, uint64_t npages, void *ctx);

static uint64_t walk_pagemap(const struct region *r, int (*want)(uint64_t), run_fn run, void *ctx,
                             uint64_t *runs) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/pagemap", (int)r->pid);
  int pm = open(path, O_RDONLY | O_CLOEXEC);
  if (pm < 0) die(path);
  static uint64_t entries[PM_BATCH];
  uint64_t total = 0, run_start = 0, run_len = 0;
  for (uint64_t va = r->vstart; va < r->vend;) {
    uint64_t n = (r->vend - va) / PAGE;
    if (n > PM_BATCH) n = PM_BATCH;
    ssize_t got = pread(pm, entries, n * 8, (off_t)(va / PAGE * 8));
    if (got <= 0) die("pread pagemap");
    n = (uint64_t)got / 8;
    for (uint64_t i = 0; i < n; i++, va += PAGE) {
      if (want(entries[i])) {
        if (run_len == 0) run_start = va;
        run_len++;
        total++;
      } else if (run_len) {
        run(r, run_start, run_len, ctx);
        (*runs)++;
        run_len = 0;
      }
    }
  }
  if (run_len) {
    run(r, run_start, run_len, ctx);
    (*runs)++;
  }
  close(pm);
  return total;
}

static int is_private(uint64_t e) { return (e & (PM_PRESENT | PM_SWAPPED)) && !(e & PM_FILE); }

struct copy_ctx {
  int out;
  char *buf;
};

static void copy_run(const struct region *r, uint64_t va, uint64_t npages, void *vctx) {
  struct copy_ctx *c = vctx;
  uint64_t len = npages * PAGE;
  for (uint64_t done = 0; done < len;) {
    uint64_t n = len - done < CHUNK ? len - done : CHUNK;
    struct iovec local = {c->buf, n}, remote = {(void *)(uintptr_t)(va + done), n};
    ssize_t got = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
    if (got < 0) die("process_vm_readv");
    if ((uint64_t)got != n) {
      errno = EIO;
      die("process_vm_readv short read");
    }
    write_all_at(c->out, c->buf, n, (off_t)(r->fileoff + (va + done - r->vstart)));
    done += n;
  }
}

static struct region parse_region(char **argv) {
  struct region r = {(pid_t)parse_u64(argv[0]), parse_u64(argv[1]), parse_u64(argv[2]),
                     parse_u64(argv[3])};
  if (r.vend <= r.vstart || r.vstart % PAGE || r.vend % PAGE) {
    fprintf(stderr, "forkd-capture: bad range\n");
    exit(2);
  }
  return r;
}

static int copy_pages(char **argv) {
  struct region r = parse_region(argv);
  double t0 = now_ms();
  int out = open(argv[4], O_WRONLY | O_CLOEXEC);
  if (out < 0) die(argv[4]);
  struct copy_ctx c = {out, malloc(CHUNK)};
  if (!c.buf) die("malloc");
  uint64_t runs = 0;
  uint64_t pages = walk_pagemap(&r, is_private, copy_run, &c, &runs);
  close(out);
  free(c.buf);
  printf("{\"pages\":%" PRIu64 ",\"runs\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"ms\":%.2f}\n", pages,
         runs, pages * PAGE, now_ms() - t0);
  return 0;
}

/* ---- compare (verification) ----------------------------------------------------------- */

static int compare(char **argv) {
  struct region r = parse_region(argv);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", (int)r.pid);
  int mem = open(path, O_RDONLY | O_CLOEXEC);
  if (mem < 0) die(path);
  int file = open(argv[4], O_RDONLY | O_CLOEXEC);
  if (file < 0) die(argv[4]);
  char *a = malloc(CHUNK), *b = malloc(CHUNK);
  if (!a || !b) die("malloc");
  uint64_t pages = 0, differing = 0, first = 0;
  for (uint64_t va = r.vstart; va < r.vend; va += CHUNK) {
    uint64_t n = r.vend - va < CHUNK ? r.vend - va : CHUNK;
    if (pread(mem, a, n, (off_t)va) != (ssize_t)n) die("pread mem");
    ssize_t got = pread(file, b, n, (off_t)(r.fileoff + va - r.vstart));
    if (got < 0) die("pread file");
    if ((uint64_t)got < n) memset(b + got, 0, n - (uint64_t)got);
    for (uint64_t off = 0; off < n; off += PAGE, pages++) {
      if (memcmp(a + off, b + off, PAGE) != 0) {
        if (!differing) first = va - r.vstart + off;
        differing++;
      }
    }
  }
  printf("{\"pages\":%" PRIu64 ",\"differing\":%" PRIu64 ",\"first_offset\":%" PRIu64 "}\n", pages,
         differing, first);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: forkd-capture sparse-copy SRC DST [SIZE]\n"
          "       forkd-capture pages PID VSTART VEND FILEOFF DST\n"
          "       forkd-capture compare PID VSTART VEND FILEOFF FILE\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  if (!strcmp(argv[1], "sparse-copy") && (argc == 4 || argc == 5))
    return sparse_copy(argv[2], argv[3], argc == 5 ? parse_u64(argv[4]) : 0);
  if (!strcmp(argv[1], "pages") && argc == 7) return copy_pages(argv + 2);
  if (!strcmp(argv[1], "compare") && argc == 7) return compare(argv + 2);
  usage();
  return 2;
}
