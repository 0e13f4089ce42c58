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
 *   forkd-capture live PID VSTART VEND FILEOFF DST
 *       like `pages`, from a copy-on-write fork of the stopped VMM (live.c: protocol)
 *   forkd-capture live-cleanup PID VSTART VEND
 *       make the VMM reap frozen forks a killed copier left, restore MADV_DONTFORK
 *   forkd-capture live-probe
 *       run the live sequence against a test process: is live capture possible here?
 *   forkd-capture diff PAGES LAYER...
 *       make PAGES a diff over a parent memory: punch every page equal to the parent's
 *       (LAYERs: the parent's chain, topmost diff first, a full file last; memdiff.c)
 *   forkd-capture overlay SRC DST
 *       write SRC's data extents into DST at the same offsets (materializing a diff)
 *   forkd-capture extents FILE
 *       list FILE's data extents (SEEK_DATA/SEEK_HOLE): what a chunked push sends, the
 *       rest staying a hole when it is installed (packs/chunks.ts)
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
#include <unistd.h>

#include "live.h"
#include "memdiff.h"
#include "pages.h"

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
  if (S_ISREG(st.st_mode) && copy_extents(in, out, &copied) < 0) die("copy extents");
  if (fsync(out) < 0 && errno != EINVAL) die("fsync");
  close(in);
  close(out);
  printf("{\"size\":%" PRIu64 ",\"copied\":%" PRIu64 ",\"ms\":%.2f}\n", size, copied, now_ms() - t0);
  return 0;
}

/* ---- pages (stop-and-copy) --------------------------------------------------------- */

static int copy_pages(char **argv) {
  struct region r = parse_region(argv);
  double t0 = now_ms();
  int out = open(argv[4], O_WRONLY | O_CLOEXEC);
  if (out < 0) die(argv[4]);
  struct copy_stats st;
  struct copy_opts opts = {0, 0};
  if (copy_private_pages(&r, out, &opts, &st) < 0) die("copy pages");
  close(out);
  printf("{\"pages\":%" PRIu64 ",\"runs\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"ms\":%.2f}\n",
         st.pages, st.runs, st.pages * PAGE, now_ms() - t0);
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

/* ---- extents (chunked push) ----------------------------------------------------------- */

static int extents(const char *file) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(file);
  struct stat st;
  if (fstat(fd, &st) < 0) die("fstat");
  printf("{\"size\":%" PRIu64 ",\"extents\":[", (uint64_t)st.st_size);
  const char *sep = "";
  for (off_t pos = 0; pos < st.st_size;) {
    off_t data = lseek(fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;
      die("SEEK_DATA");
    }
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) die("SEEK_HOLE");
    printf("%s[%" PRIu64 ",%" PRIu64 "]", sep, (uint64_t)data, (uint64_t)(hole - data));
    sep = ",";
    pos = hole;
  }
  printf("]}\n");
  close(fd);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: forkd-capture sparse-copy SRC DST [SIZE]\n"
          "       forkd-capture pages PID VSTART VEND FILEOFF DST\n"
          "       forkd-capture compare PID VSTART VEND FILEOFF FILE\n"
          "       forkd-capture live PID VSTART VEND FILEOFF DST\n"
          "       forkd-capture live-cleanup PID VSTART VEND\n"
          "       forkd-capture live-probe\n"
          "       forkd-capture diff PAGES LAYER...\n"
          "       forkd-capture overlay SRC DST\n"
          "       forkd-capture extents FILE\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  if (!strcmp(argv[1], "sparse-copy") && (argc == 4 || argc == 5))
    return sparse_copy(argv[2], argv[3], argc == 5 ? parse_u64(argv[4]) : 0);
  if (!strcmp(argv[1], "pages") && argc == 7) return copy_pages(argv + 2);
  if (!strcmp(argv[1], "compare") && argc == 7) return compare(argv + 2);
  if (!strcmp(argv[1], "live") && argc == 7) return live_capture(argv + 2);
  if (!strcmp(argv[1], "live-cleanup") && argc == 5) return live_cleanup(argv + 2);
  if (!strcmp(argv[1], "live-probe") && argc == 2) return live_probe();
  if (!strcmp(argv[1], "diff") && argc >= 4) return memdiff(argv[2], argv + 3, argc - 3);
  if (!strcmp(argv[1], "overlay") && argc == 4) return overlay(argv[2], argv[3]);
  if (!strcmp(argv[1], "extents") && argc == 3) return extents(argv[2]);
  usage();
  return 2;
}
