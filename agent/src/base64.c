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

/* 0..63 for the alphabet, 64 for anything else; built on first use. */
static unsigned char values[256];

static void build_values(void)
{
	for (int i = 0; i < 256; i++)
		values[i] = 64;
	for (int i = 0; i < 64; i++)
		values[(unsigned char)alphabet[i]] = (unsigned char)i;
}

ssize_t base64_decode(unsigned char *dst, const char *src, size_t n)
{
	if (values[0] == 0)
		build_values();
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
	const unsigned char *s = (const unsigned char *)src;
	unsigned char *o = dst;
	size_t i = 0;
	/* Four characters at a time: every upload chunk goes through here (under TCG too). */
	for (; i + 4 <= n; i += 4) {
		unsigned a = values[s[i]], b = values[s[i + 1]], c = values[s[i + 2]],
			 d = values[s[i + 3]];
		if ((a | b | c | d) & 64)
			return -1;
		unsigned v = a << 18 | b << 12 | c << 6 | d;
		o[0] = (unsigned char)(v >> 16);
		o[1] = (unsigned char)(v >> 8);
		o[2] = (unsigned char)v;
		o += 3;
	}
	unsigned acc = 0;
	int bits = 0;
	for (; i < n; i++) {
		unsigned v = values[s[i]];
		if (v & 64)
			return -1;
		acc = (acc << 6 | v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (unsigned char)(acc >> bits);
		}
	}
	return o - dst;
}
