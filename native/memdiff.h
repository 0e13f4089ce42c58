/*
 * Memory diffs: a snapshot's memory stored as the pages that differ from its parent's
 * (memdiff.c), and their materialization into a full file.
 */
#ifndef FORKD_MEMDIFF_H
#define FORKD_MEMDIFF_H

#include <stdint.h>

/* Copy `in`'s data extents into `out` at the same offsets (holes skipped). 0, or -1/errno. */
int copy_extents(int in, int out, uint64_t *copied);
/* forkd-capture diff PAGES LAYER...: punch from PAGES the pages equal to the parent's. */
int memdiff(const char *pages, char **layers, int nlayers);
/* forkd-capture overlay SRC DST: SRC's data extents written into DST. */
int overlay(const char *src, const char *dst);

#endif
