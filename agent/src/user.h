/* user.h — who an exec runs as, from the (new) root's /etc/passwd and /etc/group. */
#ifndef FORKD_USER_H
#define FORKD_USER_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define USER_MAX_GROUPS 64

struct user {
	uid_t uid;
	gid_t gid;
	char name[256];
	char home[PATH_MAX];
	gid_t groups[USER_MAX_GROUPS];
	int ngroups;
};

/* spec: a name or a decimal uid; NULL means the agent's own user. 0 or an errno
 * (ENOENT: no such user name). */
int user_lookup(const char *spec, struct user *u);

#endif
