/*
 * Live capture (issue: live branch). The VMM is stopped by the caller (QMP `stop`); this
 * makes the VMM fork by injecting clone() into one of its threads, so the kernel freezes
 * guest RAM copy-on-write in the child, and the caller resumes the VM at once. The pages
 * the VM had written are then copied from the frozen child, which is killed and reaped.
 *
 * The frozen child must never run VMM code (it shares the VMM's open disks and sockets):
 *  - it is born traced and stopped (PTRACE_O_TRACEFORK), then gets PTRACE_O_EXITKILL, so
 *    it is killed if this copier dies;
 *  - its first instruction is a stub page of ours whose only code is exit_group(0), so even
 *    a child released before EXITKILL is set ends without running anything else.
 * QEMU marks guest RAM MADV_DONTFORK: around the copy it is MADV_DOFORK instead, and every
 * other mapping MADV_DONTFORK, so the fork copies the page tables of guest RAM only.
 * A child that died while this copier could not reap it stays a zombie of the VMM until
 * `live-cleanup` makes the VMM reap it (the daemon runs it after any failed live copy and
 * when it re-adopts a VM); one still dying then (a killed copier's) is waited for.
 *
 * Protocol of `live`: prints {"event":"ready"} once prepared (the VM still running), waits
 * for a line "fork" on stdin (sent with the VM stopped), prints {"event":"forked",...} as
 * soon as the VM may resume, waits for "copy" (sent once it runs again), then prints
 * {"event":"done",...} when the copy is complete. EOF on stdin ends it cleanly at any
 * point: the frozen fork, if any, is killed and reaped and QEMU's fork advice restored.
 */
#include "live.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inject.h"
#include "pages.h"

#define STUB_SIZE 4096
/* syscall; mov eax, SYS_exit_group; xor edi, edi; syscall; ud2 — then our signature. */
static const unsigned char STUB[32] = {0x0f, 0x05, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x31, 0xff,
                                       0x0f, 0x05, 0x0f, 0x0b, 0x00, 0x00, 0x00, 'f',  'o',
                                       'r',  'k',  'd',  '-',  'l',  'i',  'v',  'e',  '-',
                                       's',  't',  'u',  'b',  '1'};

struct span {
  uint64_t start, end;
};

struct live {
  struct region ram;
  uint64_t stub;  /* the stub page in the VMM, 0 until found or made */
  int dontfork;   /* guest RAM was MADV_DONTFORK (QEMU's default) */
  pid_t child;    /* the frozen fork, 0 when none */
  /* The VMM's other mappings a fork would copy (runs of adjacent ones): made
   * MADV_DONTFORK around the fork, so that it copies the page tables of guest RAM only
   * and QEMU's own memory (heap, TCG buffers) is not left copy-on-write after it. */
  struct span *others;
  size_t n_others;
};

/* The last failure, for the probe's answer. */
static char last_error[200];

static void fail(const char *what) {
  snprintf(last_error, sizeof last_error, "%s: %s", what, strerror(errno));
  fprintf(stderr, "forkd-capture: live: %s\n", last_error);
}

static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  char *got = fgets(buf, (int)len, f);
  fclose(f);
  return got ? 0 : -1;
}

static int read_remote(pid_t pid, uint64_t addr, void *buf, size_t len) {
  struct iovec l = {buf, len}, r = {(void *)(uintptr_t)addr, len};
  return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* Whether the VMM's command line has QEMU's -sandbox with process creation allowed
 * (spawn=allow is QEMU's default): then every call we inject passes its filter. */
static int sandbox_allows_spawn(pid_t pid) {
  char path[64], buf[8192];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  for (char *a = buf; a < buf + n; a += strlen(a) + 1) {
    if (strcmp(a, "-sandbox") || a + strlen(a) + 1 >= buf + n) continue;
    const char *opt = a + strlen(a) + 1;
    return strncmp(opt, "on", 2) == 0 && !strstr(opt, "spawn=deny");
  }
  return 0;
}

/* A process under a seccomp filter that may kill an injected clone(): any filter but
 * QEMU's own -sandbox with spawn allowed (forkd's confinement, docs/security.md). */
static int seccomp_filtered(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int mode = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Seccomp: %d", &mode) == 1) break;
  fclose(f);
  return mode == 2 && !sandbox_allows_spawn(pid);
}

/* A mapping forkable today that the fork does not need: not guest RAM, not our stub, not
 * a kernel special mapping (vdso/vvar reject the advice), not I/O or PFN-mapped. */
static int other_mapping(const struct live *lv, uint64_t start, const char *header,
                         const char *flags) {
  return start != lv->ram.vstart && start != lv->stub && !strstr(header, "[v") &&
         !strstr(flags, " dc") && !strstr(flags, " io") && !strstr(flags, " pf");
}

static int add_other(struct live *lv, uint64_t start, uint64_t end) {
  if (lv->n_others && lv->others[lv->n_others - 1].end == start) {
    lv->others[lv->n_others - 1].end = end;
    return 0;
  }
  struct span *grown = realloc(lv->others, (lv->n_others + 1) * sizeof *grown);
  if (!grown) return -1;
  lv->others = grown;
  lv->others[lv->n_others++] = (struct span){start, end};
  return 0;
}

/* Read PID's smaps: our stub page, whether guest RAM carries `dc` (DONTFORK), and the
 * other forkable mappings. */
static int scan_maps(struct live *lv) {
  char path[64], line[1024], header[1024] = "";
  snprintf(path, sizeof path, "/proc/%d/smaps", (int)lv->ram.pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  uint64_t start = 0, end = 0;
  int rc = 0;
  lv->n_others = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    char perms[8] = "";
    unsigned long long ino = 1;
    uint64_t s0, e0; /* field lines such as "FilePmdMapped:" would half-parse as hex */
    if (sscanf(line, "%lx-%lx %7s %*x %*s %llu", &s0, &e0, perms, &ino) == 4) {
      start = s0;
      end = e0;
      snprintf(header, sizeof header, "%s", line);
      unsigned char head[sizeof STUB];
      if (!lv->stub && ino == 0 && end - start == STUB_SIZE && !strcmp(perms, "r-xp") &&
          read_remote(lv->ram.pid, start, head, sizeof head) == 0 &&
          !memcmp(head, STUB, sizeof STUB))
        lv->stub = start;
    } else if (!strncmp(line, "VmFlags:", 8)) {
      if (start == lv->ram.vstart) lv->dontfork = strstr(line, " dc") != NULL;
      else if (other_mapping(lv, start, header, line)) rc = add_other(lv, start, end);
    }
  }
  fclose(f);
  return rc;
}

static int poke(pid_t tid, uint64_t addr, const unsigned char *bytes, size_t len) {
  for (size_t off = 0; off < len; off += 8) {
    long word;
    memcpy(&word, bytes + off, 8);
    if (ptrace(PTRACE_POKEDATA, tid, (void *)(uintptr_t)(addr + off), (void *)word) < 0) return -1;
  }
  return 0;
}

static long checked(struct tracee *t, long nr, const uint64_t args[6], pid_t *forked,
                    const char *what) {
  long ret = 0;
  if (tracee_syscall(t, nr, args, &ret, forked) < 0) {
    fail(what);
    return -1;
  }
  if (ret < 0 && ret > -4096) {
    errno = (int)-ret;
    fail(what);
    return -1;
  }
  return ret;
}

/* Map the stub page into the VMM (it stays there, reused by later captures: 4 KiB). */
static int make_stub(struct live *lv) {
  uint64_t insn = find_syscall_insn(lv->ram.pid);
  if (!insn) {
    errno = ENOEXEC;
    fail("no syscall instruction in the VMM's vDSO");
    return -1;
  }
  struct tracee t;
  if (tracee_hold(&t, lv->ram.pid, insn, 0) < 0) {
    fail("ptrace seize");
    return -1;
  }
  const uint64_t args[6] = {0, STUB_SIZE, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                            (uint64_t)-1, 0};
  long addr = checked(&t, SYS_mmap, args, NULL, "mapping the stub page");
  int rc = addr < 0 ? -1 : poke(t.tid, (uint64_t)addr, STUB, sizeof STUB);
  if (addr >= 0 && rc < 0) fail("writing the stub page");
  tracee_release(&t); /* keeps errno */
  if (rc < 0) return -1;
  lv->stub = (uint64_t)addr;
  return 0;
}

/* The VMM thread that makes the fork: its oldest thread but the main one (QEMU's RCU
 * thread, idle), so that the main thread stays free to answer QMP (the disk switch and the
 * device state save run meanwhile); the main thread of a single-threaded process. */
static pid_t fork_thread(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return pid;
  pid_t best = pid;
  unsigned long long best_start = ~0ULL;
  for (struct dirent *de; (de = readdir(d));) {
    pid_t tid = (pid_t)atoi(de->d_name);
    if (tid <= 0 || tid == pid) continue;
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    if (read_line(path, line, sizeof line) < 0) continue;
    char *rp = strrchr(line, ')');
    unsigned long long start = 0;
    /* after "pid (comm)": fields 3..22, the 22nd being the start time */
    if (!rp || sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                              "%*d %*d %llu",
                      &start) != 1)
      continue;
    if (start < best_start) {
      best_start = start;
      best = tid;
    }
  }
  closedir(d);
  return best;
}

/* Fork advice around the fork: `isolate` lifts QEMU's MADV_DONTFORK from guest RAM and
 * sets it on every other mapping (before the stop, so the pause holds only the clone);
 * the reverse puts things back once the copy is done. The other mappings are best effort
 * (one that went away meanwhile is skipped); guest RAM must succeed. */
static int set_fork_advice(struct live *lv, int isolate) {
  struct tracee t;
  if (tracee_hold(&t, fork_thread(lv->ram.pid), lv->stub, 0) < 0) {
    fail("ptrace seize");
    return -1;
  }
  for (size_t i = 0; i < lv->n_others; i++) {
    const struct span *o = &lv->others[i];
    const uint64_t args[6] = {o->start, o->end - o->start,
                              isolate ? MADV_DONTFORK : MADV_DOFORK, 0, 0, 0};
    long ret;
    if (tracee_syscall(&t, SYS_madvise, args, &ret, NULL) < 0) break;
  }
  const uint64_t ram[6] = {lv->ram.vstart, lv->ram.vend - lv->ram.vstart,
                           isolate ? MADV_DOFORK : MADV_DONTFORK, 0, 0, 0};
  int rc = lv->dontfork && checked(&t, SYS_madvise, ram, NULL, "madvise") < 0 ? -1 : 0;
  tracee_release(&t);
  return rc;
}

static int prepare(struct live *lv) {
  int filtered = seccomp_filtered(lv->ram.pid);
  if (filtered) {
    errno = filtered < 0 ? errno : EPERM;
    fail(filtered < 0 ? "VMM process" : "the VMM's seccomp filter denies spawn (-sandbox)");
    return -1;
  }
  if (scan_maps(lv) < 0) {
    fail("reading the VMM's smaps");
    return -1;
  }
  if (!lv->stub && make_stub(lv) < 0) return -1;
  return set_fork_advice(lv, 1);
}

/* Make the held VMM fork; the child is left traced, stopped and killed if we die. */
static int freeze(struct live *lv, struct tracee *t) {
  const uint64_t fork_args[6] = {SIGCHLD, 0, 0, 0, 0, 0};
  pid_t child = 0;
  long rc = checked(t, SYS_clone, fork_args, &child, "clone");
  if (child > 0) {
    lv->child = child;
    int st;
    if (wait_traced(child, &st) < 0 ||
        ptrace(PTRACE_SETOPTIONS, child, 0, (void *)(long)PTRACE_O_EXITKILL) < 0) {
      fail("holding the frozen fork");
      rc = -1;
    }
  }
  return rc < 0 ? -1 : 0;
}

/* Make the VMM reap `child` (a zombie once we, its tracer, have waited for it). */
static int reap_in(pid_t vmm, uint64_t insn, pid_t child) {
  struct tracee t;
  if (tracee_hold(&t, vmm, insn, 0) < 0) return -1;
  const uint64_t args[6] = {(uint64_t)child, 0, WNOHANG | __WALL, 0, 0, 0};
  long ret = 0;
  int rc = 0;
  for (int i = 0; i < 100 && rc == 0; i++) {
    rc = tracee_syscall(&t, SYS_wait4, args, &ret, NULL);
    if (ret != 0) break; /* reaped, or -ECHILD: someone else did (or the VMM ignores it) */
    usleep(1000);
  }
  tracee_release(&t); /* keeps errno */
  return rc;
}

static void end_child(struct live *lv) {
  if (!lv->child) return;
  kill(lv->child, SIGKILL);
  int st;
  while (wait_traced(lv->child, &st) == 0 && !WIFEXITED(st) && !WIFSIGNALED(st)) {
  }
  if (reap_in(lv->ram.pid, lv->stub, lv->child) < 0) fail("reaping the frozen fork");
  lv->child = 0;
}

static int fork_frozen(struct live *lv, double *ms) {
  double t0 = now_ms();
  struct tracee t;
  if (tracee_hold(&t, fork_thread(lv->ram.pid), lv->stub, PTRACE_O_TRACEFORK) < 0) {
    fail("ptrace seize");
    return -1;
  }
  int rc = freeze(lv, &t);
  if (tracee_release(&t) < 0 && rc == 0) {
    fail("releasing the VMM thread");
    rc = -1;
  }
  *ms = now_ms() - t0;
  return rc;
}

static unsigned throttle_ms(void) {
  const char *v = getenv("FORKD_LIVE_THROTTLE_MS");
  return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

/* Copy the frozen child's private pages (its RAM at the fork instant) into `out`. */
static int copy_frozen(struct live *lv, int out, struct copy_stats *st, double *ms) {
  double t0 = now_ms();
  struct region frozen = lv->ram;
  frozen.pid = lv->child;
  struct copy_opts opts = {throttle_ms(), 1};
  int rc = copy_private_pages(&frozen, out, &opts, st);
  if (rc < 0) fail("copying pages from the frozen fork");
  else if (fdatasync(out) < 0 && errno != EINVAL) {
    fail("fdatasync");
    rc = -1;
  }
  *ms = now_ms() - t0;
  return rc;
}

int live_capture(char **argv) {
  struct live lv = {.ram = parse_region(argv)};
  int out = open(argv[4], O_WRONLY | O_CLOEXEC);
  if (out < 0) die(argv[4]);
  /* Die with the daemon that started us: EXITKILL then ends the frozen fork too. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (prepare(&lv) < 0) return 1;
  printf("{\"event\":\"ready\",\"stub\":%" PRIu64 ",\"dontfork\":%s}\n", lv.stub,
         lv.dontfork ? "true" : "false");
  char cmd[16];
  int forking = fgets(cmd, sizeof cmd, stdin) && !strcmp(cmd, "fork\n");
  double fork_ms = 0, copy_ms = 0, t0 = 0;
  struct copy_stats st = {0, 0};
  int rc = forking ? fork_frozen(&lv, &fork_ms) : 0;
  if (forking && rc == 0) {
    printf("{\"event\":\"forked\",\"child\":%d,\"fork_ms\":%.3f}\n", lv.child, fork_ms);
    /* Copy once told the VM runs again: on a small host the copy would otherwise compete
     * for the CPU with what QEMU still does in the pause. */
    if (!fgets(cmd, sizeof cmd, stdin) || strcmp(cmd, "copy\n") != 0) {
      errno = ECANCELED;
      fail("no \"copy\" after the fork");
      rc = -1;
    }
  }
  if (forking && rc == 0) rc = copy_frozen(&lv, out, &st, &copy_ms);
  t0 = now_ms();
  end_child(&lv);
  if (set_fork_advice(&lv, 0) < 0) rc = -1;
  free(lv.others);
  if (forking && rc == 0)
    printf("{\"event\":\"done\",\"pages\":%" PRIu64 ",\"runs\":%" PRIu64 ",\"bytes\":%" PRIu64
           ",\"fork_ms\":%.3f,\"copy_ms\":%.2f,\"reap_ms\":%.2f}\n",
           st.pages, st.runs, st.pages * PAGE, fork_ms, copy_ms, now_ms() - t0);
  close(out);
  return rc == 0 ? 0 : 1;
}

/* A child's state letter, or 0 when it is gone. */
static char state_of(pid_t pid) {
  char path[64], line[512], state;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (read_line(path, line, sizeof line) < 0) return 0;
  char *rp = strrchr(line, ')');
  return rp && sscanf(rp + 1, " %c", &state) == 1 ? state : 0;
}

/*
 * A frozen fork a killed copier left is killed by EXITKILL, but dies asynchronously (its
 * copy-on-write view of guest RAM is torn down first: slow under load): kill it again and
 * wait, bounded, until it is a zombie its parent can be made to reap.
 */
static int await_zombie(pid_t pid) {
  kill(pid, SIGKILL);
  for (int ms = 0; ms < 10000; ms += 5) {
    char state = state_of(pid);
    if (state == 'Z' || state == 0) return state == 'Z' ? 0 : -1;
    usleep(5000);
  }
  return -1;
}

/* Children of `vmm` with the VMM's own name: frozen forks nobody reaped (QEMU never forks),
 * each a zombie once this returns (one still dying is waited for). */
static int zombie_forks(pid_t vmm, pid_t *out, int max) {
  char path[64], line[512], comm[64], vcomm[64];
  snprintf(path, sizeof path, "/proc/%d/comm", (int)vmm);
  if (read_line(path, vcomm, sizeof vcomm) < 0) return -1;
  DIR *d = opendir("/proc");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) && n < max;) {
    pid_t pid = (pid_t)atoi(de->d_name);
    if (pid <= 0) continue;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_line(path, line, sizeof line) < 0) continue;
    char *rp = strrchr(line, ')');
    char state;
    int ppid;
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != vmm) continue;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    if (read_line(path, comm, sizeof comm) < 0 || strcmp(comm, vcomm)) continue;
    if (state == 'Z' || await_zombie(pid) == 0) out[n++] = pid;
  }
  closedir(d);
  return n;
}

int live_cleanup(char **argv) {
  struct live lv = {.ram = {(pid_t)parse_u64(argv[0]), parse_u64(argv[1]), parse_u64(argv[2]), 0}};
  if (scan_maps(&lv) < 0) die("reading the VMM's smaps");
  pid_t zombies[64];
  int n = zombie_forks(lv.ram.pid, zombies, 64);
  if (n < 0) die("listing the VMM's children");
  int reaped = 0;
  if (!lv.stub) lv.stub = find_syscall_insn(lv.ram.pid);
  for (int i = 0; i < n && lv.stub; i++)
    if (reap_in(lv.ram.pid, lv.stub, zombies[i]) == 0) reaped++;
  int restored = !lv.dontfork && lv.stub;
  if (restored) {
    lv.dontfork = 1; /* what QEMU set, and a killed copier may have left lifted */
    lv.n_others = 0; /* unknown now: left as they are (QEMU never forks) */
    restored = set_fork_advice(&lv, 0) == 0;
  }
  free(lv.others);
  printf("{\"zombies\":%d,\"reaped\":%d,\"dontfork_restored\":%s}\n", n, reaped,
         restored ? "true" : "false");
  return reaped == n ? 0 : 1;
}

/* The probe's target: a private anonymous mapping marked DONTFORK, like QEMU's guest RAM,
 * filled with a known pattern; it then waits in pause() to be captured. */
#define PROBE_LEN ((uint64_t)4 << 20)

static uint64_t pattern(uint64_t page) { return page * 0x9e3779b97f4a7c15ULL + 1; }

static void probe_target(int fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  unsigned char *m = mmap(NULL, PROBE_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
  if (m == MAP_FAILED) _exit(1);
  madvise(m, PROBE_LEN, MADV_DONTFORK);
  for (uint64_t p = 0; p < PROBE_LEN / PAGE; p++) {
    uint64_t v = pattern(p);
    memcpy(m + p * PAGE, &v, sizeof v);
  }
  uint64_t addr = (uintptr_t)m;
  if (write(fd, &addr, sizeof addr) != sizeof addr) _exit(1);
  for (;;) pause();
}

static int probe_verify(int fd) {
  for (uint64_t p = 0; p < PROBE_LEN / PAGE; p++) {
    uint64_t v = 0;
    if (pread(fd, &v, sizeof v, (off_t)(p * PAGE)) != sizeof v || v != pattern(p)) return -1;
  }
  return 0;
}

/* The tracer's half of the probe: the live sequence against `target`, as the copier runs
 * it against QEMU. Prints the probe's JSON line. */
static void probe_trace(pid_t target, uint64_t addr) {
  struct live lv = {.ram = {target, addr, addr + PROBE_LEN, 0}};
  int out = memfd_create("forkd-probe", MFD_CLOEXEC);
  double fork_ms = 0, copy_ms = 0;
  struct copy_stats st = {0, 0};
  const char *why = "";
  if (out < 0) why = "memfd_create";
  else if (prepare(&lv) < 0) why = "preparing (ptrace, stub page, fork advice)";
  else if (fork_frozen(&lv, &fork_ms) < 0) why = "the injected fork";
  else if (copy_frozen(&lv, out, &st, &copy_ms) < 0) why = "reading the frozen fork";
  else if (probe_verify(out) < 0) why = "the frozen fork's memory did not match";
  end_child(&lv);
  free(lv.others);
  printf("{\"available\":%s,\"reason\":\"%s%s%s\",\"fork_ms\":%.3f,\"pages\":%" PRIu64 "}\n",
         *why ? "false" : "true", why, *why && *last_error ? " failed: " : "", *why ? last_error : "",
         fork_ms, st.pages);
}

/* The target and the tracer are siblings, as QEMU and the copier are (both children of
 * the daemon): a host that allows ptrace of descendants only (Yama scope 1) fails here. */
int live_probe(void) {
  int pipefd[2];
  if (pipe(pipefd) < 0) die("pipe");
  pid_t target = fork();
  if (target < 0) die("fork");
  if (target == 0) probe_target(pipefd[1]);
  uint64_t addr = 0;
  if (read(pipefd[0], &addr, sizeof addr) != sizeof addr) {
    printf("{\"available\":false,\"reason\":\"the probe process did not start\"}\n");
  } else {
    fflush(stdout);
    pid_t tracer = fork();
    if (tracer == 0) {
      probe_trace(target, addr);
      fflush(stdout);
      _exit(0);
    }
    int st = 0;
    if (tracer < 0 || waitpid(tracer, &st, 0) < 0 || !WIFEXITED(st))
      printf("{\"available\":false,\"reason\":\"the probe's tracer crashed\"}\n");
  }
  kill(target, SIGKILL);
  waitpid(target, NULL, 0);
  return 0; /* the answer is the JSON line, available or not */
}
