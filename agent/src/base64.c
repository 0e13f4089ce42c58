/* base64.c — RFC 4648 encoder/decoder. Strict: any byte outside the alphabet is an error. */
#include "base64.h"

static const char alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode(char *dst, const unsigned char *src, size_t n)
{
	char *o = dst;
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		unsigned v = (unsigned)src[i] << 16 | (unsigned)src[i + 1] << 8 | src[i + 2];
		o[0] = alphabet[v >> 18];
		o[1] = alphabet[(v >> 12) & 63];
		o[2] = alphabet[(v >> 6) & 63];
		o[3] = alphabet[v & 63];
		o += 4;
	}
	if (i < n) {
		unsigned v = (unsigned)src[i] << 16 | (i + 1 < n ? (unsigned)src[i + 1] << 8 : 0);
		o[0] = alphabet[v >> 18];
		o[1] = alphabet[(v >> 12) & 63];
		o[2] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
		o[3] = '=';
		o += 4;
	}
	return (size_t)(o - dst);
}

static int value_of(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

ssize_t base64_decode(unsigned char *dst, const char *src, size_t n)
{
	/* Padding only at the very end: strip it, then the rest must be pure alphabet. */
	size_t pad = 0;
	while (n > 0 && pad < 2 && src[n - 1] == '=') {
		n--;
		pad++;
	}
	if (pad > 0 && (n + pad) % 4 != 0)
		return -1;
	if (n % 4 == 1)
		return -1;
	unsigned char *o = dst;
	unsigned acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		int v = value_of((unsigned char)src[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6 | (unsigned)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (unsigned char)(acc >> bits);
		}
	}
	return o - dst;
}
