/* forkmark.c — the file that tells guest processes a fork happened: the host sets the
 * hostname to the sandbox id after every boot and restore (configure), and the agent then
 * rewrites /run/forkd/sandbox-id with it (atomically: written beside, then renamed). A
 * process that remembers the id it saw, or watches the file with inotify, knows it now
 * runs in a new fork: time to reseed, reconnect, or re-register. Best effort: an image
 * without a writable /run just has no file. */
#include "forkmark.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARK_DIR "/run/forkd"
#define MARK_FILE MARK_DIR "/sandbox-id"

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
