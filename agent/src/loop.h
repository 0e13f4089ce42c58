/* loop.h — the poll set the main loop rebuilds every turn, and the clock it runs on. Whoever
 * owns an fd adds it with a callback; callbacks may only mark state, never free an object
 * another entry of the same turn points at (frees happen in the ticks after the callbacks). */
#ifndef FORKD_LOOP_H
#define FORKD_LOOP_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*poll_fn)(void *ctx, short revents);

struct poll_entry {
	poll_fn fn;
	void *ctx;
};

struct pollset {
	struct pollfd *fds;
	struct poll_entry *ents;
	size_t n, cap;
	int64_t wake_at; /* monotonic ms, -1 for none */
};

void pollset_reset(struct pollset *ps);
void pollset_add(struct pollset *ps, int fd, short events, poll_fn fn, void *ctx);
/* Return from pollset_run no later than when_ms. */
void pollset_wake_at(struct pollset *ps, int64_t when_ms);
/* poll() then the callbacks of the fds that have events. */
void pollset_run(struct pollset *ps);

int64_t now_ms(void);

#endif
