/*
 * The QEMU jail (docs/security.md "QEMU jailed"): a mount namespace whose root is an empty
 * tmpfs holding only what one VM needs, bound at the same paths as on the host, and an
 * IPC namespace of its own. Made by the launcher between fork and exec (forkd-qemu-exec).
 */
#ifndef FORKD_JAIL_H
#define FORKD_JAIL_H

#define JAIL_MAX 64

struct jail {
  /* Paths bound at the same path: read-write (the sandbox's directory, its memory file)
   * or read-only (kernel, initramfs); `chain` files have their qcow2 backing chain walked
   * and every layer bound read-only. */
  const char *rw[JAIL_MAX];
  const char *ro[JAIL_MAX];
  const char *chain[JAIL_MAX];
  int nrw, nro, nchain;
};

/* Add one --rw/--ro/--chain path; -1 when the table is full. */
int jail_add(struct jail *j, const char *flag, const char *path);

/*
 * Enter the jail: after it, "/" is the jail's root and the host's other files are gone
 * from this process's view (and QEMU's, after exec). `exe` is the program about to be
 * exec'd (found on PATH when it has no slash): bound too when it lies outside /usr.
 * Returns 0, or -1 with a message on stderr.
 */
int jail_enter(const struct jail *j, const char *exe);

#endif
