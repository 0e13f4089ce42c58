/* channel_unix.c — `--listen PATH`: one host connection at a time on a unix socket. A
 * closed connection is a host gone; the next accepted one is a new host. */
#include "channel.h"

#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct unix_channel {
	struct channel ch;
	int listen_fd;
	struct sockaddr_un addr;
};

static void on_connect(void *ctx, short revents)
{
	(void)revents;
	struct unix_channel *u = ctx;
	int fd = accept4(u->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			agent_log("accept: %s", strerror(errno));
		return;
	}
	u->ch.fd = fd;
	u->ch.on_attach(&u->ch);
}

static void unix_wait(struct channel *ch, struct pollset *ps)
{
	struct unix_channel *u = (struct unix_channel *)ch;
	pollset_add(ps, u->listen_fd, POLLIN, on_connect, u);
}

static void unix_detach(struct channel *ch)
{
	if (ch->fd >= 0)
		close(ch->fd);
	ch->fd = -1;
}

static void unix_close(struct channel *ch)
{
	struct unix_channel *u = (struct unix_channel *)ch;
	unix_detach(ch);
	close(u->listen_fd);
	unlink(u->addr.sun_path);
	free(u);
}

struct channel *channel_unix_open(const char *path)
{
	struct unix_channel *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof u->addr.sun_path) {
		agent_log("socket path too long: %s", path);
		free(u);
		return NULL;
	}
	strcpy(u->addr.sun_path, path);
	u->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (u->listen_fd < 0) {
		agent_log("socket: %s", strerror(errno));
		free(u);
		return NULL;
	}
	unlink(path); /* a stale socket from a previous run */
	if (bind(u->listen_fd, (struct sockaddr *)&u->addr, sizeof u->addr) < 0 ||
	    listen(u->listen_fd, 8) < 0) {
		agent_log("listen on %s: %s", path, strerror(errno));
		close(u->listen_fd);
		free(u);
		return NULL;
	}
	u->ch = (struct channel){
		.fd = -1, .wait = unix_wait, .detach = unix_detach, .close = unix_close};
	return &u->ch;
}
