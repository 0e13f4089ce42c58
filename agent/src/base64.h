/* base64.h — RFC 4648 base64 with padding, for every `data` field. */
#ifndef FORKD_BASE64_H
#define FORKD_BASE64_H

#include <stddef.h>
#include <sys/types.h>

#define BASE64_ENCODED_LEN(n) (4 * (((n) + 2) / 3))
#define BASE64_DECODED_MAX(n) (((n) + 3) / 4 * 3)

/* Writes BASE64_ENCODED_LEN(n) bytes (no NUL); returns that length. */
size_t base64_encode(char *dst, const unsigned char *src, size_t n);

/* Returns the decoded length, or -1 when src is not base64. Padding may be omitted. */
ssize_t base64_decode(unsigned char *dst, const char *src, size_t n);

#endif
