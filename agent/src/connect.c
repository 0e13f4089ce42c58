/* connect.c — `forkd-agent --connect SOCKET_PATH`: a byte pipe between stdin/stdout and a
 * unix socket inside the guest. The host reaches in-guest servers (the code-context runner)
 * by exec'ing the agent's own binary (/proc/1/exe) in this mode: a static C client starts in
 * a few ms where a Python client would cost hundreds under TCG. stdin EOF half-closes the
 * socket; the socket's EOF ends the program (exit 0); a failed connect exits 3. */
#include "connect.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CONNECT_BUF (64 * 1024)

static int dial_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path) {
		fprintf(stderr, "forkd-agent --connect: socket path too long: %s\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		fprintf(stderr, "forkd-agent --connect: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Copies one chunk from `from` to `to`; returns the bytes read (0 at EOF, -1 on error). */
static ssize_t pump(int from, int to)
{
	static char buf[CONNECT_BUF];
	ssize_t n = read(from, buf, sizeof buf);
	if (n < 0 && errno == EINTR)
		return 1;
	if (n > 0 && write_all(to, buf, (size_t)n) < 0)
		return -1;
	return n;
}

int run_connect(const char *path)
{
	int sock = dial_unix(path);
	if (sock < 0)
		return 3;
	bool in_open = true;
	for (;;) {
		struct pollfd fds[2] = {{.fd = sock, .events = POLLIN},
					{.fd = in_open ? 0 : -1, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (fds[0].revents) {
			ssize_t n = pump(sock, 1);
			if (n <= 0)
				return n == 0 ? 0 : 1;
		}
		if (fds[1].revents) {
			ssize_t n = pump(0, sock);
			if (n <= 0) {
				in_open = false;
				shutdown(sock, SHUT_WR);
			}
		}
	}
}
