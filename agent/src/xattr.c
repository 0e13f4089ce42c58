/* xattr.c — a file's `user.*` extended attributes: reported as an "xattrs" object beside
 * stat and list entries (with a symlink's "target"), and set or removed by `xattr_set`.
 * Only the user namespace: it is the one an unprivileged guest process can set too (E2B's
 * file metadata lives there as user.e2b.*), and the agent never touches security or
 * trusted attributes for the host. Attributes are never followed through symlinks. */
#include "agent.h"
#include "handlers.h"
#include "msg.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define USER_NS "user."
#define MAX_XATTRS 64          /* attributes reported per file, and set per request */
#define MAX_XATTR_NAME 255     /* XATTR_NAME_MAX */
#define MAX_XATTR_VALUE 4096   /* longer values are left out of replies */
#define XATTR_LIST_BUF 16384

static bool user_name(const char *name)
{
	return strncmp(name, USER_NS, sizeof USER_NS - 1) == 0 && name[sizeof USER_NS - 1] != '\0';
}

/* "xattrs": {...} when path has user attributes; nothing otherwise (and on any error: an
 * entry is still worth reporting without them). */
static void msg_xattrs(struct msg *m, const char *path)
{
	static char names[XATTR_LIST_BUF];
	static char value[MAX_XATTR_VALUE];
	ssize_t len = llistxattr(path, names, sizeof names);
	if (len <= 0)
		return;
	bool open = false;
	int count = 0;
	for (ssize_t off = 0; off < len && count < MAX_XATTRS;) {
		const char *name = names + off;
		off += (ssize_t)strlen(name) + 1;
		if (!user_name(name))
			continue;
		ssize_t n = lgetxattr(path, name, value, sizeof value);
		if (n < 0)
			continue; /* removed since, or too long to report */
		if (!open) {
			msg_open(m, "xattrs", '{');
			open = true;
		}
		msg_strn(m, name, value, (size_t)n);
		count++;
	}
	if (open)
		msg_close(m, '}');
}

void msg_stat_extras(struct msg *m, const char *path, const struct stat *st)
{
	if (S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlink(path, target, sizeof target);
		if (n >= 0 && (size_t)n < sizeof target)
			msg_strn(m, "target", target, (size_t)n);
	} else if (S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)) {
		msg_xattrs(m, path);
	}
}

/* {"type":"xattr_set","path":..,"xattrs":{"user.a":"v","user.b":null}}: set each, a null
 * removes it (a missing one is no error). Stops at the first failure, which it names. */
void handle_xattr_set(const struct request *rq)
{
	const char *path = NULL;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path))
		return;
	const struct json *attrs = req_field(rq, "xattrs");
	if (!attrs || attrs->type != JSON_OBJECT) {
		reply_error_field(rq->id, "bad_request", "xattrs",
				  "xattr_set: \"xattrs\" must be an object of strings or nulls");
		return;
	}
	if (attrs->u.kids.count > MAX_XATTRS) {
		reply_error_field(rq->id, "too_large", "xattrs", "xattr_set: more than %d attributes",
				  MAX_XATTRS);
		return;
	}
	for (const struct json *a = attrs->u.kids.first; a; a = a->next) {
		bool ok_value = a->type == JSON_NULL ||
				(a->type == JSON_STRING && a->u.str.len <= MAX_XATTR_VALUE);
		if (!user_name(a->key) || a->key_len > MAX_XATTR_NAME || strlen(a->key) != a->key_len ||
		    !ok_value) {
			reply_error_field(rq->id, "bad_request", "xattrs",
					  "xattr_set: names are user.* (at most %d bytes), values strings of at most %d bytes or null",
					  MAX_XATTR_NAME, MAX_XATTR_VALUE);
			return;
		}
	}
	for (const struct json *a = attrs->u.kids.first; a; a = a->next) {
		int rc = a->type == JSON_NULL ? lremovexattr(path, a->key)
					      : lsetxattr(path, a->key, a->u.str.s, a->u.str.len, 0);
		if (rc < 0 && !(a->type == JSON_NULL && errno == ENODATA)) {
			reply_errno(rq->id, errno, "xattr_set %s %s", path, a->key);
			return;
		}
	}
	reply_ok(rq->id);
}
