/* input.c — request framing: split the host's bytes into lines, honour the resync byte
 * (0xFF drops the partial line) and the MAX_LINE limit (an overlong line is skipped to its
 * newline and answered too_large), all before any JSON is parsed. */
#include "agent.h"
#include "handlers.h"
#include "msg.h"
#include "out.h"

#include <stdlib.h>
#include <string.h>

/* A bigger line buffer is freed after use (RSS is per fork); this one holds a whole upload
 * chunk's line (256 KiB of base64 plus the envelope), so uploads do not reallocate it. */
#define KEEP_CAP (512 * 1024)

static struct {
	char *buf;
	size_t len, cap;
	bool discarding;
} in;

void input_reset(void)
{
	in.len = 0;
	in.discarding = false;
}

static void append(const char *p, size_t n)
{
	if (in.discarding || n == 0)
		return;
	if (in.len + n > MAX_LINE) {
		in.discarding = true;
		in.len = 0;
		return;
	}
	if (in.len + n > in.cap) {
		size_t cap = in.cap ? in.cap : 4096;
		while (cap < in.len + n)
			cap *= 2;
		char *b = realloc(in.buf, cap);
		if (!b) {
			/* Answered like an overlong line: this one cannot be held. */
			in.discarding = true;
			in.len = 0;
			return;
		}
		in.buf = b;
		in.cap = cap;
	}
	memcpy(in.buf + in.len, p, n);
	in.len += n;
}

static void end_line(void)
{
	if (in.discarding) {
		reply_error(-1, "too_large", "request line longer than %d bytes", MAX_LINE);
	} else {
		dispatch_line(in.buf, in.len);
	}
	input_reset();
	if (in.cap > KEEP_CAP) {
		free(in.buf);
		in.buf = NULL;
		in.cap = 0;
	}
}

/* The offset of the first newline or resync byte at or after i, else n (memchr: an upload
 * chunk is a 256 KiB line, scanned per read). */
static size_t line_end(const char *data, size_t i, size_t n)
{
	const char *nl = memchr(data + i, '\n', n - i);
	size_t end = nl ? (size_t)(nl - data) : n;
	const char *ff = memchr(data + i, RESYNC_BYTE, end - i);
	return ff ? (size_t)(ff - data) : end;
}

void input_feed(const char *data, size_t n)
{
	size_t i = 0;
	while (i < n && out_attached()) {
		size_t j = line_end(data, i, n);
		append(data + i, j - i);
		if (j == n)
			return;
		if ((unsigned char)data[j] == RESYNC_BYTE)
			input_reset();
		else
			end_line();
		i = j + 1;
	}
}
