/* pid1.c — init duties before serving: the console as stdout/stderr, /proc /sys /dev, kernel
 * modules from /etc/forkd/modules, the image disk as the new root (switch_root style: move
 * the mounts, MS_MOVE the disk onto /, chroot), /tmp /dev/pts /dev/shm, hostname, lo up.
 * Reaping and never exiting are the loop's job (main.c). */
#include "pid1.h"
#include "forkmark.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MODULES_LIST "/etc/forkd/modules"
#define MODULES_DIR "/lib/modules/"
#define NEWROOT "/newroot"
#define ROOT_WAIT_MS 3000

static void mount_on(const char *src, const char *dir, const char *type, unsigned long flags,
		     const char *data)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		agent_log("mkdir %s: %s", dir, strerror(errno));
	if (mount(src, dir, type, flags, data) < 0 && errno != EBUSY)
		agent_log("mount %s on %s: %s", type, dir, strerror(errno));
}

/* The kernel gives init fds 0-2 only if the initramfs has /dev/console: do it ourselves. */
static void setup_console(void)
{
	mount_on("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	int con = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (con >= 0) {
		dup2(con, 1);
		dup2(con, 2);
	}
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0)
		dup2(null, 0);
	if (con > 2)
		close(con);
	if (null > 2)
		close(null);
}

static void load_module(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, MODULES_DIR "%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		agent_log("module %s: %s", name, strerror(errno));
		return;
	}
	if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
		agent_log("module %s: %s", name, strerror(errno));
	close(fd);
}

static void load_modules(void)
{
	FILE *f = fopen(MODULES_LIST, "re");
	if (!f)
		return; /* a kernel with everything built in needs no list */
	char line[512];
	while (fgets(line, sizeof line, f)) {
		char *s = line + strspn(line, " \t");
		s[strcspn(s, "\r\n")] = '\0';
		for (size_t n = strlen(s); n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'); n--)
			s[n - 1] = '\0';
		if (*s && *s != '#')
			load_module(s);
	}
	fclose(f);
}

/* The value of key=... on the kernel command line, or dflt. */
static void cmdline_arg(const char *key, const char *dflt, char *out, size_t len)
{
	snprintf(out, len, "%s", dflt);
	char buf[4096];
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	size_t klen = strlen(key);
	for (char *tok = strtok(buf, " \t\n"); tok; tok = strtok(NULL, " \t\n"))
		if (strncmp(tok, key, klen) == 0 && tok[klen] == '=')
			snprintf(out, len, "%s", tok + klen + 1);
}

static bool wait_block_device(const char *dev)
{
	for (int waited = 0; waited <= ROOT_WAIT_MS; waited += 10) {
		struct stat st;
		if (stat(dev, &st) == 0 && S_ISBLK(st.st_mode))
			return true;
		struct timespec pause = {0, 10 * 1000000};
		nanosleep(&pause, NULL);
	}
	return false;
}

/* Moves /dev /proc /sys under the new root, then the new root onto /. */
static bool switch_root(void)
{
	static const char *const moved[] = {"/dev", "/proc", "/sys"};
	for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
		char target[64];
		snprintf(target, sizeof target, NEWROOT "%s", moved[i]);
		if (mkdir(target, 0755) < 0 && errno != EEXIST)
			agent_log("mkdir %s: %s", target, strerror(errno));
		if (mount(moved[i], target, NULL, MS_MOVE, NULL) < 0)
			agent_log("move %s: %s", moved[i], strerror(errno));
	}
	if (chdir(NEWROOT) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0) {
		agent_log("switch to the disk root: %s", strerror(errno));
		if (chdir("/") < 0)
			agent_log("chdir /: %s", strerror(errno));
		return false;
	}
	if (chdir("/") < 0)
		agent_log("chdir /: %s", strerror(errno));
	return true;
}

static void mount_disk(void)
{
	char dev[256], type[64];
	cmdline_arg("forkd.root", "/dev/vda", dev, sizeof dev);
	cmdline_arg("forkd.rootfstype", "ext4", type, sizeof type);
	if (strcmp(dev, "none") == 0)
		return;
	if (!wait_block_device(dev)) {
		agent_log("no root disk %s; serving from the initramfs", dev);
		return;
	}
	if (mkdir(NEWROOT, 0755) < 0 && errno != EEXIST)
		agent_log("mkdir " NEWROOT ": %s", strerror(errno));
	/* lazytime: atime updates stay in memory, so a fork reading files of a day-old
	 * snapshot (relatime then updates atime) does not write its disk for it. */
	if (mount(dev, NEWROOT, type, MS_LAZYTIME, "") < 0) {
		agent_log("mount %s (%s): %s; serving from the initramfs", dev, type, strerror(errno));
		return;
	}
	if (switch_root())
		agent_log("root is %s (%s)", dev, type);
}

static void symlink_if_missing(const char *target, const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0 && symlink(target, path) < 0)
		agent_log("symlink %s: %s", path, strerror(errno));
}

/* In whichever root we ended up: what programs expect to find. */
static void setup_root(void)
{
	if (access("/proc/self", F_OK) < 0)
		mount_on("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (access("/sys/class", F_OK) < 0)
		mount_on("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (access("/dev/null", F_OK) < 0)
		mount_on("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mount_on("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_on("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666");
	mount_on("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	symlink_if_missing("pts/ptmx", "/dev/ptmx");
	symlink_if_missing("/proc/self/fd", "/dev/fd");
	symlink_if_missing("/proc/self/fd/0", "/dev/stdin");
	symlink_if_missing("/proc/self/fd/1", "/dev/stdout");
	symlink_if_missing("/proc/self/fd/2", "/dev/stderr");
}

static void loopback_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		agent_log("lo: socket: %s", strerror(errno));
		return;
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		agent_log("lo: get flags: %s", strerror(errno));
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		agent_log("lo: up: %s", strerror(errno));
	close(s);
}

void pid1_setup(void)
{
	setup_console();
	mount_on("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_on("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	load_modules();
	mount_disk();
	setup_root();
	fork_mark_setup();
	if (sethostname("forkd", 5) < 0)
		agent_log("sethostname: %s", strerror(errno));
	loopback_up();
}
