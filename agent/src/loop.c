/* loop.c — poll set and monotonic clock for the single event loop. */
#include "loop.h"

#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pollset_reset(struct pollset *ps)
{
	ps->n = 0;
	ps->wake_at = -1;
}

static int grow(struct pollset *ps)
{
	size_t cap = ps->cap ? ps->cap * 2 : 64;
	struct pollfd *fds = realloc(ps->fds, cap * sizeof *fds);
	if (!fds)
		return -1;
	ps->fds = fds;
	struct poll_entry *ents = realloc(ps->ents, cap * sizeof *ents);
	if (!ents)
		return -1;
	ps->ents = ents;
	ps->cap = cap;
	return 0;
}

void pollset_add(struct pollset *ps, int fd, short events, poll_fn fn, void *ctx)
{
	if (ps->n == ps->cap && grow(ps) < 0) {
		agent_log("out of memory for the poll set");
		return;
	}
	ps->fds[ps->n] = (struct pollfd){.fd = fd, .events = events};
	ps->ents[ps->n] = (struct poll_entry){.fn = fn, .ctx = ctx};
	ps->n++;
}

void pollset_wake_at(struct pollset *ps, int64_t when_ms)
{
	if (ps->wake_at < 0 || when_ms < ps->wake_at)
		ps->wake_at = when_ms;
}

void pollset_run(struct pollset *ps)
{
	int timeout = -1;
	if (ps->wake_at >= 0) {
		int64_t d = ps->wake_at - now_ms();
		timeout = d <= 0 ? 0 : d > 60000 ? 60000 : (int)d;
	}
	int n = poll(ps->fds, ps->n, timeout);
	if (n < 0) {
		if (errno != EINTR) {
			/* Should not happen; never spin on it. */
			agent_log("poll: %s", strerror(errno));
			struct timespec pause = {0, 100 * 1000000};
			nanosleep(&pause, NULL);
		}
		return;
	}
	for (size_t i = 0; i < ps->n && n > 0; i++) {
		if (ps->fds[i].revents) {
			n--;
			ps->ents[i].fn(ps->ents[i].ctx, ps->fds[i].revents);
		}
	}
}
