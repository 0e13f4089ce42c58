/* forkmark.c — the file that tells guest processes a fork happened: the host sets the
 * hostname to the sandbox id after every boot and restore (configure), and the agent then
 * rewrites /run/forkd/sandbox-id with it (atomically: written beside, then renamed). A
 * process that remembers the id it saw, or watches the file with inotify, knows it now
 * runs in a new fork: time to reseed, reconnect, or re-register. Best effort: an image
 * without a writable /run just has no file.
 * /run/forkd is a tmpfs of its own (mounted at boot, so every fork has it): the rewrite
 * stays in guest memory instead of dirtying the root disk, whose journal commit and
 * writeback 5 s later would make every fork translate the disk write path (~3 MiB of
 * QEMU's translated code per child, docs/idle.md). */
#include "forkmark.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARK_DIR "/run/forkd"
#define MARK_FILE MARK_DIR "/sandbox-id"

void fork_mark_setup(void)
{
	mkdir("/run", 0755);
	mkdir(MARK_DIR, 0755);
	if (mount("forkd-run", MARK_DIR, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0)
		agent_log("mount tmpfs on " MARK_DIR ": %s", strerror(errno));
}

void fork_mark(const char *id)
{
	mkdir("/run", 0755);
	mkdir(MARK_DIR, 0755);
	int fd = open(MARK_FILE ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	size_t n = strlen(id);
	bool ok = write(fd, id, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
	close(fd);
	if (!ok || rename(MARK_FILE ".tmp", MARK_FILE) < 0)
		unlink(MARK_FILE ".tmp");
}
