/* out.h — the queue of reply lines to the host. Writes never block the loop: what the
 * channel does not take now waits for POLLOUT, and producers of bulk output (exec pipes,
 * file reads) pause while out_full() — that is the backpressure. */
#ifndef FORKD_OUT_H
#define FORKD_OUT_H

#include <stdbool.h>
#include <stddef.h>

#define OUT_HIGH (1024 * 1024)        /* above this, bulk producers pause */
#define OUT_INPUT_CAP (16 * 1024 * 1024) /* above this, stop reading requests too */

void out_attach(int fd);  /* a host arrived on fd (non-blocking) */
void out_detach(void);    /* the host is gone: drop everything */
void out_drop(void);      /* a new session: what was queued belongs to the old one */
bool out_attached(void);
bool out_broken(void);
void out_fail(void);      /* a line could not be built: force the host to resync */    /* a write failed: the caller must treat the host as gone */
void out_send(char *buf, size_t len); /* takes ownership of a malloc'd whole line */
void out_flush(void);     /* the channel is writable */
size_t out_queued(void);
bool out_full(void);

#endif
