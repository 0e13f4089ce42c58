/*
 * libcapstone.so.4 for QEMU, empty (docs/idle.md "Leaner children"): QEMU links the
 * capstone disassembler only to print guest or host code in its debug logs (`-d in_asm`,
 * the monitor's `x/i`), which forkd never asks for, yet loading it costs every child
 * 1.3 MiB of private memory (the dynamic linker relocates its pointer tables). QEMU finds
 * this one first (LD_LIBRARY_PATH in its environment, tuning.ts): every call fails, and QEMU's
 * disassembly then falls back to its own x86 disassembler. No libc: nothing to relocate.
 * FORKD_QEMU_DISASSEMBLER=on gives QEMU the real library back.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef size_t csh;

enum { CS_ERR_OK = 0, CS_ERR_ARCH = 2, CS_ERR_OPTION = 4 };

int cs_open(int arch, int mode, csh *handle);
int cs_close(csh *handle);
int cs_option(csh handle, int type, size_t value);
void *cs_malloc(csh handle);
bool cs_disasm_iter(csh handle, const uint8_t **code, size_t *size, uint64_t *address, void *insn);

int cs_open(int arch, int mode, csh *handle) {
  (void)arch;
  (void)mode;
  if (handle) *handle = 0;
  return CS_ERR_ARCH;
}

int cs_close(csh *handle) {
  (void)handle;
  return CS_ERR_OK;
}

int cs_option(csh handle, int type, size_t value) {
  (void)handle;
  (void)type;
  (void)value;
  return CS_ERR_OPTION;
}

void *cs_malloc(csh handle) {
  (void)handle;
  return NULL;
}

bool cs_disasm_iter(csh handle, const uint8_t **code, size_t *size, uint64_t *address, void *insn) {
  (void)handle;
  (void)code;
  (void)size;
  (void)address;
  (void)insn;
  return false;
}
