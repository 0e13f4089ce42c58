/* files.c — the file family: file_write (streamed into a temp file beside the target,
 * renamed over it at eof), file_read (streamed out in chunks as the host keeps up), stat,
 * list (entries with their user xattrs and symlink targets, xattr.c), mkdir, remove. Paths are used as given; symlinks are never followed by stat/list
 * and never descended into by a recursive remove. */
#include "agent.h"
#include "handlers.h"
#include "msg.h"
#include "out.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ENTRIES 10000

struct writer {
	struct writer *next;
	int64_t id;
	int fd;
	char *tmp, *path;
	int64_t size;
};

struct reader {
	struct reader *next;
	int64_t id;
	int fd;
	bool pollable; /* a pipe or device: read when poll says so, not on every turn */
	bool ready;
	int64_t size;
};

static struct writer *writers;
static struct reader *readers;
static unsigned char chunk_buf[MAX_CHUNK];

/* ---- paths ---- */

/* The last component, trailing slashes ignored; "/" for the root. */
static void base_name(const char *path, char *out, size_t len)
{
	size_t end = strlen(path);
	while (end > 1 && path[end - 1] == '/')
		end--;
	size_t start = end;
	while (start > 0 && path[start - 1] != '/')
		start--;
	if (end == 1 && path[0] == '/')
		start = 0;
	snprintf(out, len, "%.*s", (int)(end - start), path + start);
}

/* Creates every missing directory of path (not path itself unless last is true). */
static int make_dirs(const char *path, mode_t mode, bool last)
{
	char *p = strdup(path);
	if (!p)
		return ENOMEM;
	int err = 0;
	size_t len = strlen(p);
	for (size_t i = 1; i <= len && !err; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		if (p[i] == '\0' && !last)
			break;
		char saved = p[i];
		p[i] = '\0';
		struct stat st;
		if (mkdir(p, i == len ? mode : 0755) == 0) {
			if (i == len)
				chmod(p, mode); /* the umask must not change what the host asked for */
		} else if (errno != EEXIST) {
			err = errno;
		} else if (stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) {
			err = i == len ? EEXIST : ENOTDIR;
		}
		p[i] = saved;
	}
	free(p);
	return err;
}

/* ---- file_write ---- */

static struct writer *find_writer(int64_t id)
{
	for (struct writer *w = writers; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

static void drop_writer(struct writer *w)
{
	for (struct writer **pp = &writers; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	if (w->fd >= 0) {
		close(w->fd);
		unlink(w->tmp);
	}
	free(w->tmp);
	free(w->path);
	free(w);
}

static void fail_writer(struct writer *w, int err)
{
	reply_errno(w->id, err, "file_write %s", w->path);
	drop_writer(w);
}

/* dir/.forkd-write.XXXXXX beside path, opened with the final mode. */
static int open_temp(const char *path, int64_t mode, char **tmp_out)
{
	const char *slash = strrchr(path, '/');
	int dlen = slash ? (int)(slash - path) + 1 : 0;
	size_t len = (size_t)dlen + 32;
	char *tmp = malloc(len);
	if (!tmp)
		return -ENOMEM;
	snprintf(tmp, len, "%.*s.forkd-write.XXXXXX", dlen, path);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		free(tmp);
		return -err;
	}
	fchmod(fd, (mode_t)mode);
	*tmp_out = tmp;
	return fd;
}

static int prepare_target(const char *path, bool parents)
{
	size_t len = strlen(path);
	if (len == 0 || path[len - 1] == '/')
		return EISDIR;
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return EISDIR;
	const char *slash = strrchr(path, '/');
	if (!parents || !slash || slash == path)
		return 0;
	char *dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return ENOMEM;
	int err = make_dirs(dir, 0755, true);
	free(dir);
	return err;
}

void handle_file_write(const struct request *rq)
{
	const char *path = NULL;
	int64_t mode = 0644;
	bool parents = true;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path) ||
	    !req_uint(rq, "mode", false, 07777, &mode) || !req_bool(rq, "parents", &parents))
		return;
	if (find_writer(rq->id)) {
		reply_error(rq->id, "bad_request", "file_write: id %lld is in use", (long long)rq->id);
		return;
	}
	int err = prepare_target(path, parents);
	if (err) {
		reply_errno(rq->id, err, "file_write %s", path);
		return;
	}
	struct writer *w = calloc(1, sizeof *w);
	char *p = strdup(path);
	int fd = w && p ? open_temp(path, mode, &w->tmp) : -ENOMEM;
	if (fd < 0) {
		reply_errno(rq->id, -fd, "file_write %s", path);
		free(w);
		free(p);
		return;
	}
	w->id = rq->id;
	w->fd = fd;
	w->path = p;
	w->next = writers;
	writers = w;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Chunks for an unknown id (never started, or already failed) are ignored. */
void handle_data(const struct request *rq)
{
	struct writer *w = rq->id >= 0 ? find_writer(rq->id) : NULL;
	if (!w)
		return;
	const unsigned char *data;
	size_t n;
	if (!req_chunk(rq, "data", &data, &n)) {
		drop_writer(w); /* the error just sent is its terminal */
		return;
	}
	int err = write_all(w->fd, data, n);
	if (err)
		fail_writer(w, err);
	else
		w->size += (int64_t)n;
}

void handle_eof(const struct request *rq)
{
	struct writer *w = rq->id >= 0 ? find_writer(rq->id) : NULL;
	if (!w)
		return;
	int fd = w->fd;
	w->fd = -1;
	if (close(fd) < 0 || rename(w->tmp, w->path) < 0) {
		int err = errno;
		unlink(w->tmp);
		fail_writer(w, err);
		return;
	}
	struct msg m;
	msg_begin(&m, "result", w->id);
	msg_int(&m, "size", w->size);
	msg_send(&m);
	drop_writer(w);
}

/* ---- file_read ---- */

void handle_file_read(const struct request *rq)
{
	const char *path = NULL;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path))
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		reply_errno(rq->id, errno, "file_read %s", path);
		if (fd >= 0)
			close(fd);
		return;
	}
	struct reader *r = S_ISDIR(st.st_mode) ? NULL : calloc(1, sizeof *r);
	if (!r) {
		reply_errno(rq->id, S_ISDIR(st.st_mode) ? EISDIR : ENOMEM, "file_read %s", path);
		close(fd);
		return;
	}
	*r = (struct reader){.next = readers, .id = rq->id, .fd = fd, .pollable = !S_ISREG(st.st_mode)};
	readers = r;
}

static void on_readable(void *ctx, short revents)
{
	(void)revents;
	((struct reader *)ctx)->ready = true;
}

void files_poll(struct pollset *ps)
{
	if (!readers || !out_attached() || out_full())
		return;
	for (struct reader *r = readers; r; r = r->next) {
		if (r->pollable)
			pollset_add(ps, r->fd, POLLIN, on_readable, r);
		else
			pollset_wake_at(ps, 0);
	}
}

/* One chunk; false when the reader is done (result or error sent). */
static bool read_chunk(struct reader *r)
{
	ssize_t n = read(r->fd, chunk_buf, sizeof chunk_buf);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		r->ready = false;
		return true;
	}
	if (n < 0) {
		reply_errno(r->id, errno, "file_read");
		return false;
	}
	struct msg m;
	if (n == 0) {
		msg_begin(&m, "result", r->id);
		msg_int(&m, "size", r->size);
	} else {
		msg_begin(&m, "data", r->id);
		msg_b64(&m, "data", chunk_buf, (size_t)n);
		r->size += n;
	}
	msg_send(&m);
	return n > 0;
}

void files_tick(void)
{
	for (struct reader **pp = &readers; *pp;) {
		struct reader *r = *pp;
		if (!out_attached() || out_full() || (r->pollable && !r->ready) || read_chunk(r)) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		close(r->fd);
		free(r);
	}
}

void files_session_end(void)
{
	while (writers)
		drop_writer(writers);
	while (readers) {
		struct reader *r = readers;
		readers = r->next;
		close(r->fd);
		free(r);
	}
}

/* ---- stat, list ---- */

void handle_stat(const struct request *rq)
{
	const char *path = NULL;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path))
		return;
	struct stat st;
	if (lstat(path, &st) < 0) {
		reply_errno(rq->id, errno, "stat %s", path);
		return;
	}
	char name[PATH_MAX];
	base_name(path, name, sizeof name);
	struct msg m;
	msg_begin(&m, "result", rq->id);
	msg_stat(&m, name, &st);
	msg_stat_extras(&m, path, &st);
	msg_send(&m);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every name but . and .., malloc'd; NULL (and errno) on failure. */
static char **read_names(DIR *d, size_t *count)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **p = realloc(names, cap * sizeof *p);
			if (!p)
				break;
			names = p;
		}
		if (!(names[n] = strdup(de->d_name)))
			break;
		n++;
	}
	*count = n;
	if (!names)
		names = malloc(sizeof *names);
	return names;
}

static void send_entries(int64_t id, const char *dir, int dfd, char **names, size_t n)
{
	char full[PATH_MAX];
	struct msg m;
	msg_begin(&m, "result", id);
	msg_open(&m, "entries", '[');
	for (size_t i = 0; i < n && i < MAX_ENTRIES; i++) {
		struct stat st;
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* removed since readdir */
		msg_open(&m, NULL, '{');
		msg_stat(&m, names[i], &st);
		if (snprintf(full, sizeof full, "%s/%s", dir, names[i]) < (int)sizeof full)
			msg_stat_extras(&m, full, &st);
		msg_close(&m, '}');
	}
	msg_close(&m, ']');
	msg_bool(&m, "truncated", n > MAX_ENTRIES);
	msg_send(&m);
}

void handle_list(const struct request *rq)
{
	const char *path = NULL;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path))
		return;
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		reply_errno(rq->id, errno, "list %s", path);
		if (dfd >= 0)
			close(dfd);
		return;
	}
	size_t n;
	char **names = read_names(d, &n);
	if (!names) {
		reply_errno(rq->id, ENOMEM, "list %s", path);
	} else {
		qsort(names, n, sizeof *names, by_name);
		send_entries(rq->id, path, dirfd(d), names, n);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
}

/* ---- mkdir, remove ---- */

void handle_mkdir(const struct request *rq)
{
	const char *path = NULL;
	int64_t mode = 0755;
	bool parents = false;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path) ||
	    !req_uint(rq, "mode", false, 07777, &mode) || !req_bool(rq, "parents", &parents))
		return;
	int err = 0;
	if (parents) {
		err = make_dirs(path, (mode_t)mode, true);
		if (err == EEXIST) {
			struct stat st;
			err = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : EEXIST;
		}
	} else if (mkdir(path, (mode_t)mode) < 0) {
		err = errno;
	} else {
		chmod(path, (mode_t)mode);
	}
	if (err)
		reply_errno(rq->id, err, "mkdir %s", path);
	else
		reply_ok(rq->id);
}

/* Removes name under parent; a symlink is removed, never followed. 0 or an errno. */
static int remove_tree(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOTDIR && errno != ELOOP)
			return errno;
		return unlinkat(parent, name, 0) < 0 ? errno : 0;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		int err = errno;
		close(fd);
		return err;
	}
	int err = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int e = de->d_type == DT_DIR || de->d_type == DT_UNKNOWN
				? remove_tree(fd, de->d_name)
				: (unlinkat(fd, de->d_name, 0) < 0 ? errno : 0);
		if (e && !err)
			err = e;
	}
	closedir(d);
	if (!err && unlinkat(parent, name, AT_REMOVEDIR) < 0)
		err = errno;
	return err;
}

void handle_remove(const struct request *rq)
{
	const char *path = NULL;
	bool recursive = false;
	if (!req_need_id(rq) || !req_string(rq, "path", true, &path) ||
	    !req_bool(rq, "recursive", &recursive))
		return;
	struct stat st;
	int err = 0;
	if (lstat(path, &st) < 0)
		err = errno;
	else if (!S_ISDIR(st.st_mode))
		err = unlink(path) < 0 ? errno : 0;
	else if (!recursive)
		err = rmdir(path) < 0 ? errno : 0;
	else if (strcmp(path, "/") == 0)
		err = EBUSY;
	else
		err = remove_tree(AT_FDCWD, path);
	if (err)
		reply_errno(rq->id, err, "remove %s", path);
	else
		reply_ok(rq->id);
}
