/* main.c — forkd-agent: modes, signals, and the single poll() loop that serves the host.
 *   PID 1 (getpid()==1): init duties (pid1.c), then the virtio port "forkd.agent"; never exits.
 *   --listen PATH: the same protocol on a unix socket (tests); exits on SIGTERM/SIGINT.
 *   --virtio [NAME]: the port without init duties (debugging inside a guest).
 *   --connect PATH: a byte pipe from stdin/stdout to a guest unix socket (connect.c). */
#include "agent.h"
#include "channel.h"
#include "connect.h"
#include "handlers.h"
#include "log.h"
#include "out.h"
#include "pid1.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define PORT_NAME "forkd.agent"
#define PORT_WAIT_MS 5000

enum agent_mode agent_mode;

static int signal_fd = -1;
static volatile bool quit;
static char host_buf[64 * 1024];

/* SIGCHLD (and the stop signals) arrive on a signalfd; nothing runs in a signal handler. */
static void setup_signals(void)
{
	struct sigaction ign = {.sa_handler = SIG_IGN};
	sigaction(SIGPIPE, &ign, NULL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	/* Blocked before any thread exists, so every thread inherits the mask. */
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (signal_fd < 0)
		agent_log("signalfd: %s", strerror(errno));
}

/* The child code dup2()s onto 0-2, so they must never be one of our own fds. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int n = open("/dev/null", O_RDWR);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

static void on_signal(void *ctx, short revents)
{
	(void)ctx;
	(void)revents;
	struct signalfd_siginfo si;
	while (read(signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
		/* PID 1 ignores stop requests: exiting would panic the kernel. */
		if (si.ssi_signo != SIGCHLD && agent_mode == MODE_LISTEN)
			quit = true;
	}
	exec_reap();
}

static void host_attached(struct channel *ch)
{
	out_attach(ch->fd);
	input_reset();
	agent_log("host attached");
}

static void host_gone(struct channel *ch)
{
	agent_log("host gone");
	out_detach();
	input_reset();
	session_end();
	ch->detach(ch);
}

static void on_host(void *ctx, short revents)
{
	struct channel *ch = ctx;
	if (revents & POLLOUT)
		out_flush();
	if (revents & POLLIN) {
		ssize_t n = read(ch->fd, host_buf, sizeof host_buf);
		if (n > 0)
			input_feed(host_buf, (size_t)n);
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			out_fail();
	} else if (revents & (POLLHUP | POLLERR | POLLNVAL)) {
		out_fail();
	}
}

static void add_host(struct channel *ch, struct pollset *ps)
{
	short events = 0;
	if (out_queued() < OUT_INPUT_CAP)
		events |= POLLIN;
	if (out_queued() > 0)
		events |= POLLOUT;
	pollset_add(ps, ch->fd, events, on_host, ch);
}

static void serve(struct channel *ch)
{
	static struct pollset ps;
	ch->on_attach = host_attached;
	exec_reap();
	while (!quit) {
		pollset_reset(&ps);
		if (signal_fd >= 0)
			pollset_add(&ps, signal_fd, POLLIN, on_signal, NULL);
		else
			pollset_wake_at(&ps, now_ms() + 100); /* no signalfd: reap by polling */
		if (ch->fd >= 0)
			add_host(ch, &ps);
		else
			ch->wait(ch, &ps);
		exec_poll(&ps);
		files_poll(&ps);
		pty_poll(&ps);
		pollset_run(&ps);
		if (signal_fd < 0)
			exec_reap();
		exec_tick(now_ms());
		files_tick();
		pty_tick(now_ms());
		if (ch->fd >= 0 && out_broken())
			host_gone(ch);
	}
}

static void __attribute__((noreturn)) run_pid1(void)
{
	agent_mode = MODE_PID1;
	pid1_setup();
	setup_signals();
	spawn_init();
	struct channel *ch = channel_virtio_open(PORT_NAME, PORT_WAIT_MS);
	for (;;) {
		serve(ch);
		agent_log("the loop ended; restarting it"); /* unreachable: quit is never set */
	}
}

static int run_listen(const char *path)
{
	agent_mode = MODE_LISTEN;
	ensure_std_fds();
	setup_signals();
	spawn_init();
	/* As root on a developer's host, `configure hostname` must not rename the host. */
	if (geteuid() == 0 && unshare(CLONE_NEWUTS) < 0)
		agent_log("unshare(CLONE_NEWUTS): %s", strerror(errno));
	struct channel *ch = channel_unix_open(path);
	if (!ch)
		return 1;
	agent_log("ready (protocol %d, agent %s) on %s", PROTOCOL_VERSION, AGENT_VERSION, path);
	serve(ch);
	exec_kill_all();
	pty_hangup_all();
	session_end();
	ch->close(ch);
	agent_log("stopped");
	return 0;
}

static int run_virtio(const char *name)
{
	agent_mode = MODE_VIRTIO;
	ensure_std_fds();
	setup_signals();
	spawn_init();
	serve(channel_virtio_open(name, PORT_WAIT_MS));
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: forkd-agent (as PID 1)\n"
			"       forkd-agent --listen SOCKET_PATH\n"
			"       forkd-agent --virtio [PORT_NAME]\n"
			"       forkd-agent --version\n"
			"       forkd-agent --connect SOCKET_PATH\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (getpid() == 1)
		run_pid1();
	if (argc == 3 && strcmp(argv[1], "--listen") == 0)
		return run_listen(argv[2]);
	if ((argc == 2 || argc == 3) && strcmp(argv[1], "--virtio") == 0)
		return run_virtio(argc == 3 ? argv[2] : PORT_NAME);
	if (argc == 3 && strcmp(argv[1], "--connect") == 0)
		return run_connect(argv[2]);
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("forkd-agent %s (protocol %d)\n", AGENT_VERSION, PROTOCOL_VERSION);
		return 0;
	}
	return usage();
}
