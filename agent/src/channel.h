/* channel.h — the transport seam between the host and the loop: the virtio-serial port in a
 * guest, a unix socket in tests. While a host is attached, `fd` is its non-blocking byte
 * stream and the loop reads and writes it; otherwise `fd` is -1 and the channel adds
 * whatever it waits on to the poll set, calling on_attach when a host arrives. */
#ifndef FORKD_CHANNEL_H
#define FORKD_CHANNEL_H

#include "loop.h"

struct channel {
	int fd;
	/* Poll set entries while no host is attached. */
	void (*wait)(struct channel *ch, struct pollset *ps);
	/* The host went away (EOF, HUP, write error): stop using fd and wait for the next. */
	void (*detach)(struct channel *ch);
	/* The agent stops (--listen only). */
	void (*close)(struct channel *ch);
	/* Set by the loop: a host is attached at ch->fd. */
	void (*on_attach)(struct channel *ch);
};

/* Finds the virtio port named `name` (waiting up to wait_ms for it to appear); keeps looking
 * in the background when it has not. Never NULL. */
struct channel *channel_virtio_open(const char *name, int wait_ms);
/* Listens on a unix stream socket at path; NULL on failure (logged). */
struct channel *channel_unix_open(const char *path);

#endif
