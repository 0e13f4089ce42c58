/* user.c — a tiny /etc/passwd and /etc/group reader. Not getpwnam(): it must read the
 * image's files and nothing else (no NSS, no nscd socket). */
#include "user.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Splits a line at ':' in place into at most max fields; returns how many. */
static int split(char *line, char **f, int max)
{
	int n = 0;
	line[strcspn(line, "\n")] = '\0';
	while (n < max) {
		f[n++] = line;
		char *c = strchr(line, ':');
		if (!c)
			break;
		*c = '\0';
		line = c + 1;
	}
	return n;
}

static bool parse_id(const char *s, unsigned long *out)
{
	if (!*s)
		return false;
	char *end;
	errno = 0;
	*out = strtoul(s, &end, 10);
	return !*end && !errno && *out <= 0xFFFFFFFEul && s[0] != '-';
}

/* Fills u from the passwd line matching name (when given) or uid. */
static bool find_passwd(const char *name, uid_t uid, struct user *u)
{
	FILE *f = fopen("/etc/passwd", "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) {
		char *fl[7];
		unsigned long id, gid;
		if (split(line, fl, 7) < 7 || !parse_id(fl[2], &id) || !parse_id(fl[3], &gid))
			continue;
		if (name ? strcmp(fl[0], name) != 0 : id != uid)
			continue;
		u->uid = (uid_t)id;
		u->gid = (gid_t)gid;
		snprintf(u->name, sizeof u->name, "%s", fl[0]);
		snprintf(u->home, sizeof u->home, "%s", fl[5]);
		found = true;
	}
	fclose(f);
	return found;
}

static bool listed(char *members, const char *name)
{
	for (char *m = strtok(members, ","); m; m = strtok(NULL, ","))
		if (strcmp(m, name) == 0)
			return true;
	return false;
}

/* The primary group plus every /etc/group entry naming the user. */
static void find_groups(struct user *u)
{
	u->groups[0] = u->gid;
	u->ngroups = 1;
	FILE *f = u->name[0] ? fopen("/etc/group", "re") : NULL;
	if (!f)
		return;
	char line[8192];
	while (u->ngroups < USER_MAX_GROUPS && fgets(line, sizeof line, f)) {
		char *fl[4];
		unsigned long gid;
		if (split(line, fl, 4) < 4 || !parse_id(fl[2], &gid) || (gid_t)gid == u->gid)
			continue;
		if (listed(fl[3], u->name))
			u->groups[u->ngroups++] = (gid_t)gid;
	}
	fclose(f);
}

int user_lookup(const char *spec, struct user *u)
{
	memset(u, 0, sizeof *u);
	unsigned long id = 0;
	bool numeric = spec ? parse_id(spec, &id) : true;
	if (!spec)
		id = geteuid();
	if (!find_passwd(numeric ? NULL : spec, (uid_t)id, u)) {
		if (!numeric)
			return ENOENT;
		/* A uid the image does not know still runs, in its own group, at /. */
		u->uid = (uid_t)id;
		u->gid = spec ? (gid_t)id : getegid();
		strcpy(u->home, "/");
	}
	find_groups(u);
	return 0;
}
