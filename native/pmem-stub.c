/*
 * libpmem.so.1 for QEMU, without its dependencies (docs/idle.md "Leaner children"): QEMU
 * links libpmem only for guest RAM on persistent memory (`memory-backend-file,pmem=on`),
 * which forkd never asks for, yet libpmem brings libndctl, libdaxctl, libkmod and OpenSSL's
 * libcrypto into every QEMU, whose relocated tables cost each child ~0.45 MiB of private
 * memory. This one exports the two calls QEMU makes, done as on memory that is not
 * persistent (a copy; nothing to flush). No libc: nothing to relocate.
 */
#include <stddef.h>

void *pmem_memcpy_persist(void *dest, const void *src, size_t len);
void pmem_persist(const void *addr, size_t len);

/* A plain copy (built with -fno-builtin and without libc, so no memcpy call). */
void *pmem_memcpy_persist(void *dest, const void *src, size_t len) {
  volatile unsigned char *d = dest;
  const unsigned char *s = src;
  while (len--) *d++ = *s++;
  return dest;
}

void pmem_persist(const void *addr, size_t len) {
  (void)addr;
  (void)len;
}
