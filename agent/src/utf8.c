/* utf8.c — UTF-8 validation shared by the JSON reader (strings must be valid, RFC 8259) and
 * writer (invalid bytes become U+FFFD). */
#include "json.h"

size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned min;
	unsigned cp;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2, min = 0x80, cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3, min = 0x800, cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4, min = 0x10000, cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}
