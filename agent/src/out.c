/* out.c — reply queue to the host; see out.h. One whole line per buffer, written with as
 * few write() calls as the channel allows (virtio-serial takes at most 32 KiB per call). */
#include "out.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct chunk {
	struct chunk *next;
	char *buf;
	size_t len, off;
};

static struct {
	int fd;
	bool broken;
	struct chunk *head, *tail;
	size_t queued;
} out = {.fd = -1};

static void drop_all(void)
{
	while (out.head) {
		struct chunk *c = out.head;
		out.head = c->next;
		free(c->buf);
		free(c);
	}
	out.tail = NULL;
	out.queued = 0;
}

void out_attach(int fd)
{
	drop_all();
	out.fd = fd;
	out.broken = false;
}

void out_detach(void)
{
	drop_all();
	out.fd = -1;
	out.broken = false;
}

void out_drop(void)
{
	drop_all();
}

bool out_attached(void)
{
	return out.fd >= 0 && !out.broken;
}

bool out_broken(void)
{
	return out.broken;
}

void out_fail(void)
{
	if (out.fd >= 0)
		out.broken = true;
	drop_all();
}

size_t out_queued(void)
{
	return out.queued;
}

bool out_full(void)
{
	return out.queued > OUT_HIGH;
}

/* Bytes written, 0 when the channel is full; -1 (and broken) when the host is gone.
 * A 0 return from write() means the same as EPIPE/EIO here: nobody is reading. */
static ssize_t write_some(const char *p, size_t n)
{
	ssize_t w = write(out.fd, p, n);
	if (w > 0)
		return w;
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	out.broken = true;
	drop_all();
	return -1;
}

static size_t write_now(const char *p, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = write_some(p + done, n - done);
		if (w <= 0)
			break;
		done += (size_t)w;
	}
	return done;
}

void out_send(char *buf, size_t len)
{
	if (!out_attached()) {
		free(buf);
		return;
	}
	size_t off = out.head ? 0 : write_now(buf, len);
	if (off == len || out.broken) {
		free(buf);
		return;
	}
	struct chunk *c = malloc(sizeof *c);
	if (!c) {
		/* Losing a line would desync the host; dropping the host forces a resync instead. */
		free(buf);
		out_fail();
		return;
	}
	*c = (struct chunk){.buf = buf, .len = len, .off = off};
	if (out.tail)
		out.tail->next = c;
	else
		out.head = c;
	out.tail = c;
	out.queued += len - off;
}

void out_flush(void)
{
	while (out.head && out_attached()) {
		struct chunk *c = out.head;
		size_t w = write_now(c->buf + c->off, c->len - c->off);
		if (out.broken)
			return;
		c->off += w;
		out.queued -= w;
		if (c->off < c->len)
			return;
		out.head = c->next;
		if (!out.head)
			out.tail = NULL;
		free(c->buf);
		free(c);
	}
}
