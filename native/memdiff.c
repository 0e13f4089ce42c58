/*
 * Memory diffs (docs/snapshots.md "How a branch's memory is stored"). A diff is a sparse
 * file of the guest's RAM size whose data extents are the pages that differ from its
 * parent snapshot's memory; a hole means "as in the parent". A full memory file is the
 * same shape, where a hole means zero. So a chain of diffs over a full file reads like
 * qcow2 layers: a page comes from the topmost file that has data there.
 *
 *   diff PAGES LAYER...   punch out of PAGES (the pages a VM wrote, written into an empty
 *                         file) every page equal to the parent's: LAYERs are the parent's
 *                         chain, its own diff first and a full file last
 *   overlay SRC DST       write SRC's data extents into DST at the same offsets (the
 *                         materialization of a diff over a copy of its parent)
 */
#define _FILE_OFFSET_BITS 64
#include "memdiff.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pages.h"

#define MAX_LAYERS 64

int copy_extents(int in, int out, uint64_t *copied) {
  off_t pos = 0;
  for (;;) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) return 0;
      return -1;
    }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) return -1;
    off_t ioff = data, ooff = data;
    while (ioff < hole) {
      ssize_t n = copy_file_range(in, &ioff, out, &ooff, (size_t)(hole - ioff), 0);
      if (n < 0) return -1;
      if (n == 0) break;
      *copied += (uint64_t)n;
    }
    pos = hole;
  }
}

int overlay(const char *src, const char *dst) {
  double t0 = now_ms();
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) die(src);
  int out = open(dst, O_WRONLY | O_CLOEXEC);
  if (out < 0) die(dst);
  uint64_t copied = 0;
  if (copy_extents(in, out, &copied) < 0) die("overlay");
  if (fsync(out) < 0) die("fsync");
  close(in);
  close(out);
  printf("{\"copied\":%" PRIu64 ",\"ms\":%.2f}\n", copied, now_ms() - t0);
  return 0;
}

static int read_all_at(int fd, char *buf, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pread(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) { /* past the end: zeros */
      memset(buf, 0, len);
      return 0;
    }
    buf += n;
    len -= (size_t)n;
    off += n;
  }
  return 0;
}

/* The parent's content of [off, off+len) into `buf`: per page, the topmost layer with data
 * there; the last layer is full (its holes are zeros). `got` marks pages already read. */
static int parent_content(const int *layers, int nlayers, off_t off, size_t len, char *buf,
                          unsigned char *got) {
  size_t npages = len / PAGE;
  memset(buf, 0, len);
  memset(got, 0, npages);
  for (int l = 0; l < nlayers; l++) {
    off_t pos = off, end = off + (off_t)len;
    while (pos < end) {
      off_t data = lseek(layers[l], pos, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;
      if (data < 0) return -1;
      if (data >= end) break;
      off_t hole = lseek(layers[l], data, SEEK_HOLE);
      if (hole < 0) return -1;
      if (hole > end) hole = end;
      for (off_t p = data & ~(off_t)(PAGE - 1); p < hole; p += (off_t)PAGE) {
        size_t i = (size_t)(p - off) / PAGE;
        if (got[i]) continue;
        if (read_all_at(layers[l], buf + i * PAGE, PAGE, p) < 0) return -1;
        got[i] = 1;
      }
      pos = hole;
    }
  }
  return 0;
}

static int punch(int fd, off_t off, off_t len) {
  return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
}

struct diff_stats {
  uint64_t pages, kept;
};

/* Compare one data extent of PAGES with the parent, chunk by chunk; punch equal pages. */
static int diff_extent(int pages, const int *layers, int nlayers, off_t data, off_t hole,
                       struct diff_stats *st) {
  static char mine[CHUNK], theirs[CHUNK];
  static unsigned char got[CHUNK / PAGE];
  for (off_t off = data; off < hole; off += (off_t)CHUNK) {
    size_t len = (size_t)(hole - off < (off_t)CHUNK ? hole - off : (off_t)CHUNK);
    if (read_all_at(pages, mine, len, off) < 0) return -1;
    if (parent_content(layers, nlayers, off, len, theirs, got) < 0) return -1;
    off_t run = -1;
    for (size_t p = 0; p <= len; p += PAGE) {
      int same = p < len && memcmp(mine + p, theirs + p, PAGE) == 0;
      if (p < len) {
        st->pages++;
        st->kept += !same;
      }
      if (same && run < 0) run = off + (off_t)p;
      if (!same && run >= 0) {
        if (punch(pages, run, off + (off_t)p - run) < 0) return -1;
        run = -1;
      }
    }
  }
  return 0;
}

int memdiff(const char *pages_path, char **layer_paths, int nlayers) {
  double t0 = now_ms();
  if (nlayers < 1 || nlayers > MAX_LAYERS) {
    fprintf(stderr, "forkd-capture: 1 to %d parent layers\n", MAX_LAYERS);
    exit(2);
  }
  int pages = open(pages_path, O_RDWR | O_CLOEXEC);
  if (pages < 0) die(pages_path);
  int layers[MAX_LAYERS];
  for (int l = 0; l < nlayers; l++) {
    layers[l] = open(layer_paths[l], O_RDONLY | O_CLOEXEC);
    if (layers[l] < 0) die(layer_paths[l]);
  }
  struct diff_stats st = {0, 0};
  off_t pos = 0;
  for (;;) {
    off_t data = lseek(pages, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;
    if (data < 0) die("SEEK_DATA");
    off_t hole = lseek(pages, data, SEEK_HOLE);
    if (hole < 0) die("SEEK_HOLE");
    if (diff_extent(pages, layers, nlayers, data, hole, &st) < 0) die("diff");
    pos = hole;
  }
  if (fsync(pages) < 0) die("fsync");
  for (int l = 0; l < nlayers; l++) close(layers[l]);
  close(pages);
  printf("{\"pages\":%" PRIu64 ",\"kept\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"ms\":%.2f}\n",
         st.pages, st.kept, st.kept * PAGE, now_ms() - t0);
  return 0;
}
