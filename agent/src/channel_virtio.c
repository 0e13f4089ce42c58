/* channel_virtio.c — the virtio-serial port. With no host attached, poll() on the port says
 * POLLIN|POLLHUP and read() returns 0 at once, so the loop must not poll it then; a blocking
 * write() is the only thing that waits for a host. A helper thread parks in a blocking write
 * of "\n" and wakes the loop through an eventfd when it returns: a host has attached. */
#include "channel.h"

#include "agent.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RETRY_MS 1000

enum vstate {
	V_LOOKING, /* no port yet, or parking failed: retry at retry_at */
	V_PARKED,  /* the helper is blocked in write(): no host */
	V_ATTACHED,
};

struct virtio_channel {
	struct channel ch;
	char name[64];
	enum vstate state;
	int port;
	int go[2];  /* loop -> helper: park now */
	int done;   /* helper -> loop (eventfd): the park write returned */
	atomic_int park_errno;
	bool helper_started;
	int64_t retry_at;
	bool said_missing;
	bool announced;
};

/* /dev/<entry> of the /sys/class/virtio-ports entry whose name file reads `name`. */
static bool find_port(const char *name, char *dev, size_t dev_len)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[512], buf[128];
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(buf, sizeof buf, f)) {
			buf[strcspn(buf, "\n")] = '\0';
			if (strcmp(buf, name) == 0) {
				snprintf(dev, dev_len, "/dev/%s", de->d_name);
				found = true;
			}
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

static int open_port(const char *name)
{
	char dev[300];
	if (!find_port(name, dev, sizeof dev))
		return -1;
	/* The device node may lag the sysfs entry (devtmpfs is filled asynchronously). */
	return open(dev, O_RDWR | O_CLOEXEC | O_NOCTTY);
}

static void *helper_main(void *arg)
{
	struct virtio_channel *v = arg;
	for (;;) {
		char c;
		if (read(v->go[0], &c, 1) != 1) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		ssize_t w;
		do
			w = write(v->port, "\n", 1);
		while (w < 0 && errno == EINTR);
		atomic_store(&v->park_errno, w == 1 ? 0 : (w < 0 ? errno : EIO));
		uint64_t one = 1;
		while (write(v->done, &one, sizeof one) < 0 && errno == EINTR)
			;
	}
}

static void set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static void park(struct virtio_channel *v)
{
	if (!v->helper_started) {
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 64 * 1024);
		int err = pthread_create(&t, &attr, helper_main, v);
		pthread_attr_destroy(&attr);
		if (err) {
			agent_log("cannot start the port helper thread: %s", strerror(err));
			v->state = V_LOOKING;
			v->retry_at = now_ms() + RETRY_MS;
			return;
		}
		v->helper_started = true;
	}
	set_nonblock(v->port, false);
	v->state = V_PARKED;
	ssize_t w = write(v->go[1], "p", 1);
	(void)w; /* a pipe with one byte in flight at most cannot be full */
}

static void on_parked(void *ctx, short revents)
{
	(void)revents;
	struct virtio_channel *v = ctx;
	uint64_t n;
	if (read(v->done, &n, sizeof n) != sizeof n)
		return;
	int err = atomic_load(&v->park_errno);
	if (err) {
		agent_log("waiting for the host on the port: %s; retrying", strerror(err));
		v->state = V_LOOKING;
		v->retry_at = now_ms() + RETRY_MS;
		return;
	}
	set_nonblock(v->port, true);
	v->state = V_ATTACHED;
	v->ch.fd = v->port;
	v->ch.on_attach(&v->ch);
}

static void try_open(struct virtio_channel *v)
{
	if (v->port < 0) {
		v->port = open_port(v->name);
		if (v->port < 0) {
			if (!v->said_missing)
				agent_log("no virtio port named %s yet; still looking", v->name);
			v->said_missing = true;
			v->retry_at = now_ms() + RETRY_MS;
			return;
		}
	}
	if (!v->announced) {
		agent_log("ready (protocol %d, agent %s)", PROTOCOL_VERSION, AGENT_VERSION);
		v->announced = true;
	}
	park(v);
}

static void virtio_wait(struct channel *ch, struct pollset *ps)
{
	struct virtio_channel *v = (struct virtio_channel *)ch;
	if (v->state == V_LOOKING) {
		if (now_ms() >= v->retry_at)
			try_open(v);
		else
			pollset_wake_at(ps, v->retry_at);
	}
	if (v->state == V_PARKED)
		pollset_add(ps, v->done, POLLIN, on_parked, v);
	else if (v->state == V_LOOKING)
		pollset_wake_at(ps, v->retry_at);
}

static void virtio_detach(struct channel *ch)
{
	struct virtio_channel *v = (struct virtio_channel *)ch;
	ch->fd = -1;
	park(v);
}

static void virtio_close(struct channel *ch)
{
	(void)ch; /* the port stays open for as long as the guest runs */
}

struct channel *channel_virtio_open(const char *name, int wait_ms)
{
	static struct virtio_channel v;
	v.ch = (struct channel){
		.fd = -1, .wait = virtio_wait, .detach = virtio_detach, .close = virtio_close};
	snprintf(v.name, sizeof v.name, "%s", name);
	v.port = -1;
	v.state = V_LOOKING;
	if (pipe2(v.go, O_CLOEXEC) < 0 || (v.done = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		agent_log("cannot create the port helper's pipes: %s", strerror(errno));
	int64_t deadline = now_ms() + wait_ms;
	while ((v.port = open_port(name)) < 0 && now_ms() < deadline) {
		struct timespec pause = {0, 20 * 1000000};
		nanosleep(&pause, NULL);
	}
	v.retry_at = now_ms();
	return &v.ch;
}
