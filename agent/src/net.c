/* net.c — bring up the guest's network from what the host pushes in `configure`: loopback,
 * eth0 with a static address and a default route, and /etc/resolv.conf. Static because the
 * host (QEMU user networking in the sandbox's namespace) always hands out the same address,
 * and forks keep it; ioctls because the image may have no `ip` tool at all. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define NET_IF "eth0"

static void set_sin(struct sockaddr *sa, in_addr_t a)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = a;
}

static int link_up(int fd, const char *name)
{
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	return ioctl(fd, SIOCSIFFLAGS, &ifr) < 0 ? errno : 0;
}

static int set_address(int fd, in_addr_t addr, int prefix)
{
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NET_IF);
	set_sin(&ifr.ifr_addr, addr);
	if (ioctl(fd, SIOCSIFADDR, &ifr) < 0)
		return errno;
	in_addr_t mask = prefix == 0 ? 0 : htonl(~0u << (32 - prefix));
	set_sin(&ifr.ifr_netmask, mask);
	return ioctl(fd, SIOCSIFNETMASK, &ifr) < 0 ? errno : 0;
}

static int default_route(int fd, in_addr_t gw)
{
	struct rtentry rt = {0};
	set_sin(&rt.rt_dst, 0);
	set_sin(&rt.rt_genmask, 0);
	set_sin(&rt.rt_gateway, gw);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)NET_IF;
	/* A restored fork already has it: configure is idempotent. */
	return ioctl(fd, SIOCADDRT, &rt) < 0 && errno != EEXIST ? errno : 0;
}

/* Whether `path` holds exactly these n bytes. */
static bool file_is(const char *path, const char *want, size_t n)
{
	char have[128];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t got = read(fd, have, sizeof(have));
	close(fd);
	return got == (ssize_t)n && memcmp(have, want, n) == 0;
}

/* Written to a staging file and renamed, so a reader never sees half a file. Left alone
 * when it already says so (every fork of a snapshot, whose address plan is the same): a
 * rewrite would dirty the root disk in every fork (its journal commit and writeback cost
 * each child translated code and QEMU heap, docs/idle.md). */
static int write_resolv(const char *dns)
{
	char buf[80];
	int n = snprintf(buf, sizeof(buf), "nameserver %s\n", dns);
	if (file_is("/etc/resolv.conf", buf, (size_t)n))
		return 0;
	mkdir("/etc", 0755);
	int fd = open("/etc/.resolv.conf.forkd", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	int err = write(fd, buf, (size_t)n) == n ? 0 : (errno ? errno : EIO);
	close(fd);
	if (!err && rename("/etc/.resolv.conf.forkd", "/etc/resolv.conf") < 0)
		err = errno;
	return err;
}

static bool parse_cidr(const char *s, in_addr_t *addr, int *prefix)
{
	char ip[INET_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	if (n >= sizeof(ip))
		return false;
	memcpy(ip, s, n);
	ip[n] = 0;
	char *end;
	long p = slash ? strtol(slash + 1, &end, 10) : 32;
	if ((slash && *end) || p < 0 || p > 32)
		return false;
	*prefix = (int)p;
	return inet_pton(AF_INET, ip, addr) == 1;
}

int net_configure(const struct net_config *c, const char **what)
{
	in_addr_t addr, gw, dns;
	int prefix, p2;
	*what = "parse the address";
	if (!parse_cidr(c->address, &addr, &prefix) || !parse_cidr(c->gateway, &gw, &p2) ||
	    !parse_cidr(c->dns, &dns, &p2))
		return EINVAL;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	int err;
	if ((*what = "bring up lo", err = link_up(fd, "lo")) ||
	    (*what = "address " NET_IF, err = set_address(fd, addr, prefix)) ||
	    (*what = "bring up " NET_IF, err = link_up(fd, NET_IF)) ||
	    (*what = "add the default route", err = default_route(fd, gw)))
		goto out;
	*what = "write /etc/resolv.conf";
	err = write_resolv(c->dns);
out:
	close(fd);
	return err;
}
