/* log.c — "forkd-agent: ..." lines on stderr, each in one write() so lines never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void agent_log(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "forkd-agent: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	ssize_t w = write(2, line, len);
	(void)w; /* nowhere to report a failed log line */
}
