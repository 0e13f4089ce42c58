/* configure.c — what the host pushes after boot and after every restore so that forks
 * differ: wall clock, entropy (reseeding the CRNG), hostname, exec environment defaults. */
#include "agent.h"
#include "forkmark.h"
#include "env.h"
#include "handlers.h"
#include "msg.h"
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_ENTROPY 512

/* From <linux/random.h>, which musl-gcc does not see. */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

struct config {
	int64_t time_ms;
	unsigned char *entropy;
	size_t entropy_len;
	const char *hostname;
	const struct json *env;
	struct net_config net;
};

static bool read_env(const struct request *rq, const struct json **out)
{
	const struct json *env = req_field(rq, "env");
	if (!env)
		return true;
	if (env->type != JSON_OBJECT || env->u.kids.count > MAX_LIST) {
		reply_error(rq->id, "bad_request", "configure: \"env\" must be an object of at most %d strings",
			    MAX_LIST);
		return false;
	}
	for (const struct json *kv = env->u.kids.first; kv; kv = kv->next) {
		bool str_ok = kv->type == JSON_STRING && !memchr(kv->u.str.s, 0, kv->u.str.len);
		if (!env_key_ok(kv->key, kv->key_len) || !(str_ok || kv->type == JSON_NULL)) {
			reply_error(rq->id, "bad_request", "configure: env \"%s\" must map to a string or null",
				    kv->key);
			return false;
		}
	}
	*out = env;
	return true;
}

static bool read_config(const struct request *rq, struct config *c)
{
	*c = (struct config){.time_ms = -1};
	if (!req_uint(rq, "time_ms", false, INT64_MAX, &c->time_ms) ||
	    !req_string(rq, "hostname", false, &c->hostname) || !read_env(rq, &c->env) ||
	    !req_string(rq, "net_address", false, &c->net.address) ||
	    !req_string(rq, "net_gateway", false, &c->net.gateway) ||
	    !req_string(rq, "net_dns", false, &c->net.dns))
		return false;
	if (c->net.address && (!c->net.gateway || !c->net.dns)) {
		reply_error(rq->id, "bad_request", "configure: \"net_address\" needs \"net_gateway\" and \"net_dns\"");
		return false;
	}
	if (c->hostname && strlen(c->hostname) > 64) {
		reply_error(rq->id, "bad_request", "configure: \"hostname\" is longer than 64 bytes");
		return false;
	}
	if (req_field(rq, "entropy"))
		return req_data(rq, "entropy", MAX_ENTROPY, &c->entropy, &c->entropy_len);
	return true;
}

static int set_clock(int64_t ms)
{
	/* --listen runs on a developer's host: its clock is not ours to move. */
	if (agent_mode == MODE_LISTEN)
		return 0;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	return clock_settime(CLOCK_REALTIME, &ts) < 0 ? errno : 0;
}

/* Privilege is optional outside a guest: writing to /dev/urandom still mixes the bytes in. */
static bool tolerable(int err)
{
	return agent_mode != MODE_PID1 && err == EPERM;
}

static int add_entropy(const unsigned char *buf, size_t n)
{
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int err = 0;
	if (write(fd, buf, n) != (ssize_t)n)
		err = errno ? errno : EIO;
	struct {
		int entropy_count;
		int buf_size;
		unsigned char buf[MAX_ENTROPY];
	} pool = {.entropy_count = (int)n * 8, .buf_size = (int)n};
	memcpy(pool.buf, buf, n);
	if (!err && ioctl(fd, RNDADDENTROPY, &pool) < 0 && !tolerable(errno))
		err = errno;
	/* Crediting alone does not reseed a CRNG that is already ready; forks would share it. */
	if (!err && ioctl(fd, RNDRESEEDCRNG) < 0 && !tolerable(errno) && errno != ENODATA)
		err = errno;
	close(fd);
	return err;
}

static bool apply_env(const struct json *env)
{
	struct env *d = env_defaults();
	for (const struct json *kv = env->u.kids.first; kv; kv = kv->next) {
		if (kv->type == JSON_NULL)
			env_unset(d, kv->key, kv->key_len);
		else if (!env_set(d, kv->key, kv->key_len, kv->u.str.s))
			return false;
	}
	return true;
}

/* --listen runs on a developer's host: its network is not ours to change. */
static int configure_net(const struct net_config *n, const char **what)
{
	return agent_mode == MODE_LISTEN ? 0 : net_configure(n, what);
}

void handle_configure(const struct request *rq)
{
	struct config c;
	bool pty_hangup = false; /* a restored fork: its terminals belong to the source */
	if (!req_need_id(rq) || !req_bool(rq, "pty_hangup", &pty_hangup) || !read_config(rq, &c))
		return;
	if (pty_hangup)
		pty_hangup_all();
	int err;
	const char *what = "";
	if (c.time_ms >= 0 && (err = set_clock(c.time_ms)))
		reply_errno(rq->id, err, "configure: set the clock");
	else if (c.entropy && (err = add_entropy(c.entropy, c.entropy_len)))
		reply_errno(rq->id, err, "configure: add entropy");
	else if (c.hostname && sethostname(c.hostname, strlen(c.hostname)) < 0)
		reply_errno(rq->id, errno, "configure: set the hostname");
	else if (c.env && !apply_env(c.env))
		reply_errno(rq->id, ENOMEM, "configure: env");
	else if (c.net.address && (err = configure_net(&c.net, &what)))
		reply_errno(rq->id, err, "configure: network: %s", what);
	else
		reply_ok(rq->id);
	if (c.hostname && agent_mode == MODE_PID1)
		fork_mark(c.hostname);
	free(c.entropy);
}
