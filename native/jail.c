/*
 * The QEMU jail (jail.h): unshare a mount and an IPC namespace, mount an empty tmpfs,
 * bind into it at their host paths only the files one VM needs, pivot_root into it, drop
 * the old root and make the new one read-only. Every source is opened (O_PATH, in the new
 * namespace: a bind takes only that namespace's mounts) before the tmpfs goes up and is
 * bound through /proc/self/fd/N, so a source the tmpfs shadows (a FORKD_HOME under /tmp)
 * is still reached.
 *
 * What every jail holds besides the caller's paths: /usr read-only (QEMU, its libraries,
 * modules and firmware) with the top-level links or directories that lead into it (/bin,
 * /lib, /lib64…), the loader's cache, the resolver's configuration (slirp forwards the
 * guest's DNS to it; the sandbox's namespace redirects that to the proxy), and the
 * devices QEMU opens (/dev/null, zero, full, random, urandom, kvm). No /proc, no /sys, no
 * /etc beyond those two files, no /root, no /home, no other sandbox.
 */
#include "jail.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sched.h>

/* Where the new root is mounted before pivot_root (any directory: only this namespace
 * sees the tmpfs over it, and every source is already open). */
#define STAGE "/tmp"
#define MAX_BINDS 256
#define MAX_CHAIN 64

struct bind {
  char path[PATH_MAX];
  int fd;
  int ro;
  int dir;
};

struct plan {
  struct bind b[MAX_BINDS];
  int n;
  /* Top-level symbolic links of / that lead into /usr (merged /usr): made again as links. */
  char link[8][2][PATH_MAX];
  int nlink;
};

static int failed(const char *what, const char *path) {
  fprintf(stderr, "forkd-qemu-exec: jail: %s %s: %s\n", what, path, strerror(errno));
  return -1;
}

int jail_add(struct jail *j, const char *flag, const char *path) {
  if (strcmp(flag, "--rw") == 0 && j->nrw < JAIL_MAX) {
    j->rw[j->nrw++] = path;
  } else if (strcmp(flag, "--ro") == 0 && j->nro < JAIL_MAX) {
    j->ro[j->nro++] = path;
  } else if (strcmp(flag, "--chain") == 0 && j->nchain < JAIL_MAX) {
    j->chain[j->nchain++] = path;
  } else {
    return -1;
  }
  return 0;
}

/* Open `path` to bind it later; a missing optional path is skipped. */
static int plan_add(struct plan *p, const char *path, int ro, int optional) {
  if (p->n >= MAX_BINDS) {
    errno = E2BIG;
    return failed("too many paths at", path);
  }
  for (int i = 0; i < p->n; i++) {
    if (strcmp(p->b[i].path, path) == 0) return 0;
  }
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return optional && errno == ENOENT ? 0 : failed("cannot open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return failed("cannot stat", path);
  }
  struct bind *b = &p->b[p->n++];
  snprintf(b->path, sizeof b->path, "%s", path);
  b->fd = fd;
  b->ro = ro;
  b->dir = S_ISDIR(st.st_mode);
  return 0;
}

static uint64_t be64(const unsigned char *x) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | x[i];
  return v;
}

/*
 * Every file of the qcow2 chain under `top`, as QEMU will open them at start: the backing
 * file each header names (relative names against the layer's directory), down to a file
 * that is not qcow2 (the raw image). A name QEMU would not open as a path ends the walk.
 */
static int plan_chain(struct plan *p, const char *top) {
  char cur[PATH_MAX];
  snprintf(cur, sizeof cur, "%s", top);
  for (int depth = 0; depth < MAX_CHAIN; depth++) {
    if (plan_add(p, cur, 1, 0) < 0) return -1;
    int fd = open(cur, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return failed("cannot read", cur);
    unsigned char h[20];
    char name[PATH_MAX];
    ssize_t got = pread(fd, h, sizeof h, 0);
    if (got != (ssize_t)sizeof h || memcmp(h, "QFI\xfb", 4) != 0) {
      close(fd);
      return 0;
    }
    uint64_t off = be64(h + 8);
    uint32_t len = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
    if (off == 0 || len == 0 || len >= sizeof name) {
      close(fd);
      return 0;
    }
    got = pread(fd, name, len, (off_t)off);
    close(fd);
    if (got != (ssize_t)len) return 0;
    name[len] = '\0';
    if (strchr(name, ':') != NULL && name[0] != '/') return 0; /* a protocol, not a file */
    char next[2 * PATH_MAX];
    if (name[0] == '/') {
      snprintf(next, sizeof next, "%s", name);
    } else {
      const char *slash = strrchr(cur, '/');
      int dirlen = slash ? (int)(slash - cur) : 0;
      snprintf(next, sizeof next, "%.*s/%s", dirlen, cur, name);
    }
    if (strlen(next) >= sizeof cur || access(next, F_OK) != 0) return 0; /* QEMU says why */
    snprintf(cur, sizeof cur, "%s", next);
  }
  return 0;
}

/* The file execvp would run for `exe`, or NULL. */
static const char *resolve_exe(const char *exe, char *out, size_t size) {
  if (strchr(exe, '/') != NULL) return realpath(exe, out);
  const char *path = getenv("PATH");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char cand[PATH_MAX];
    snprintf(cand, sizeof cand, "%s/%s", d, exe);
    if (access(cand, X_OK) == 0) return realpath(cand, out);
  }
  (void)size;
  return NULL;
}

static int plan_fixed(struct plan *p) {
  static const char *top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
  static const char *dev[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                              "/dev/random", "/dev/urandom", "/dev/kvm"};
  if (plan_add(p, "/usr", 1, 0) < 0) return -1;
  for (size_t i = 0; i < sizeof top / sizeof *top; i++) {
    struct stat st;
    if (lstat(top[i], &st) != 0) continue;
    if (S_ISLNK(st.st_mode) && p->nlink < 8) {
      ssize_t len = readlink(top[i], p->link[p->nlink][1], PATH_MAX - 1);
      if (len < 0) return failed("cannot read the link", top[i]);
      p->link[p->nlink][1][len] = '\0';
      snprintf(p->link[p->nlink][0], PATH_MAX, "%s", top[i]);
      p->nlink++;
    } else if (S_ISDIR(st.st_mode) && plan_add(p, top[i], 1, 0) < 0) {
      return -1;
    }
  }
  if (plan_add(p, "/etc/ld.so.cache", 1, 1) < 0) return -1;
  if (plan_add(p, "/etc/resolv.conf", 1, 1) < 0) return -1;
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) {
    if (plan_add(p, dev[i], 0, 1) < 0) return -1;
  }
  return 0;
}

/* Whether `path` lies in (or is) a directory already bound: seen through that bind. */
static int covered(const struct plan *p, int upto, const char *path) {
  for (int i = 0; i < upto; i++) {
    size_t len = strlen(p->b[i].path);
    if (p->b[i].dir && strncmp(path, p->b[i].path, len) == 0 &&
        (path[len] == '/' || path[len] == '\0')) {
      return 1;
    }
  }
  return 0;
}

static int by_length(const void *a, const void *b) {
  return (int)strlen(((const struct bind *)a)->path) - (int)strlen(((const struct bind *)b)->path);
}

/* mkdir -p of `path`'s directories under the stage (with the last one too for a dir). */
static int make_target(const char *path, int dir) {
  char t[PATH_MAX + sizeof STAGE];
  snprintf(t, sizeof t, STAGE "%s", path);
  for (char *s = t + sizeof STAGE; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(t, 0755) != 0 && errno != EEXIST) return failed("cannot make", t);
    *s = '/';
  }
  if (dir) return mkdir(t, 0755) != 0 && errno != EEXIST ? failed("cannot make", t) : 0;
  int fd = open(t, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return failed("cannot make", t);
  close(fd);
  return 0;
}

/* The per-mount flags a bind inherits, so a read-only remount keeps them (nosuid…). */
static unsigned long kept_flags(const char *target) {
  struct statvfs sv;
  if (statvfs(target, &sv) != 0) return 0;
  unsigned long f = 0;
  if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  return f;
}

static int bind_one(const struct bind *b, int rw_hardened) {
  char src[64], target[PATH_MAX + sizeof STAGE];
  snprintf(src, sizeof src, "/proc/self/fd/%d", b->fd);
  snprintf(target, sizeof target, STAGE "%s", b->path);
  if (make_target(b->path, b->dir) < 0) return -1;
  if (mount(src, target, NULL, MS_BIND, NULL) != 0) return failed("cannot bind", b->path);
  unsigned long flags = 0;
  if (b->ro) flags = MS_RDONLY | kept_flags(target);
  if (rw_hardened) flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (flags && mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | flags, NULL) != 0) {
    return failed("cannot restrict", b->path);
  }
  return 0;
}

static int build(struct plan *p) {
  if (mount("forkd-jail", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) {
    return failed("cannot mount a tmpfs on", STAGE);
  }
  qsort(p->b, (size_t)p->n, sizeof *p->b, by_length);
  for (int i = 0; i < p->n; i++) {
    if (covered(p, i, p->b[i].path)) continue;
    /* What QEMU may write (its directory, its memory file) it may not run code from. */
    const int writable_file = !p->b[i].ro && strncmp(p->b[i].path, "/dev/", 5) != 0;
    if (bind_one(&p->b[i], writable_file) < 0) return -1;
  }
  for (int i = 0; i < p->nlink; i++) {
    char t[PATH_MAX + sizeof STAGE];
    snprintf(t, sizeof t, STAGE "%s", p->link[i][0]);
    if (symlink(p->link[i][1], t) != 0) return failed("cannot link", t);
  }
  if (mkdir(STAGE "/.old", 0700) != 0) return failed("cannot make", STAGE "/.old");
  if (syscall(SYS_pivot_root, STAGE, STAGE "/.old") != 0) return failed("pivot_root", STAGE);
  if (chdir("/") != 0) return failed("chdir", "/");
  if (umount2("/.old", MNT_DETACH) != 0) return failed("cannot unmount", "the old root");
  if (rmdir("/.old") != 0) return failed("cannot remove", "/.old");
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
    return failed("cannot make read-only", "/");
  }
  return 0;
}

int jail_enter(const struct jail *j, const char *exe) {
  static struct plan p;
  p.n = p.nlink = 0;
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0) return failed("unshare", "(mount, ipc)");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return failed("private", "/");
  if (plan_fixed(&p) < 0) return -1;
  for (int i = 0; i < j->nrw; i++) {
    if (plan_add(&p, j->rw[i], 0, 0) < 0) return -1;
  }
  for (int i = 0; i < j->nro; i++) {
    if (plan_add(&p, j->ro[i], 1, 0) < 0) return -1;
  }
  for (int i = 0; i < j->nchain; i++) {
    if (plan_chain(&p, j->chain[i]) < 0) return -1;
  }
  char real[PATH_MAX];
  if (resolve_exe(exe, real, sizeof real) && plan_add(&p, real, 1, 0) < 0) return -1;
  int rc = build(&p);
  for (int i = 0; i < p.n; i++) close(p.b[i].fd);
  return rc;
}
