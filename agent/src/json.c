/* json.c — the JSON reader. It enforces MAX_DEPTH as it descends, so deep input costs neither
 * stack nor memory; strings must be valid UTF-8 as RFC 8259 asks. Nodes live in the request's
 * arena (json_arena.c); the writer is jbuf.c. */
#include "json.h"

#include "agent.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *s, *end;
	struct json_arena *a;
	enum json_error err;
};

static struct json *parse_value(struct parser *p, int depth);

static void fail(struct parser *p, enum json_error e)
{
	if (p->err == JSON_OK)
		p->err = e;
}

static void skip_ws(struct parser *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
		p->s++;
}

static struct json *node(struct parser *p, enum json_type t)
{
	struct json *v = json_arena_alloc(p->a, sizeof *v);
	if (!v) {
		fail(p, JSON_NO_MEMORY);
		return NULL;
	}
	memset(v, 0, sizeof *v);
	v->type = t;
	return v;
}

static int hex4(const char *s)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

static char *put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		*o++ = (char)cp;
	} else if (cp < 0x800) {
		*o++ = (char)(0xC0 | cp >> 6);
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*o++ = (char)(0xE0 | cp >> 12);
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else {
		*o++ = (char)(0xF0 | cp >> 18);
		*o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	}
	return o;
}

/* After a backslash-u: one code point, a surrogate pair joined, a lone surrogate as U+FFFD. */
static bool parse_escape_u(struct parser *p, char **o)
{
	if (p->end - p->s < 4)
		return false;
	int cp = hex4(p->s);
	if (cp < 0)
		return false;
	p->s += 4;
	if (cp >= 0xD800 && cp <= 0xDBFF && p->end - p->s >= 6 && p->s[0] == '\\' &&
	    p->s[1] == 'u') {
		int lo = hex4(p->s + 2);
		if (lo >= 0xDC00 && lo <= 0xDFFF) {
			p->s += 6;
			*o = put_utf8(*o, 0x10000 + (((unsigned)cp - 0xD800) << 10) +
						  ((unsigned)lo - 0xDC00));
			return true;
		}
	}
	if (cp >= 0xD800 && cp <= 0xDFFF)
		cp = 0xFFFD;
	*o = put_utf8(*o, (unsigned)cp);
	return true;
}

static bool parse_escape(struct parser *p, char **o)
{
	if (p->s >= p->end)
		return false;
	char c = *p->s++;
	switch (c) {
	case '"': case '\\': case '/': *(*o)++ = c; return true;
	case 'b': *(*o)++ = '\b'; return true;
	case 'f': *(*o)++ = '\f'; return true;
	case 'n': *(*o)++ = '\n'; return true;
	case 'r': *(*o)++ = '\r'; return true;
	case 't': *(*o)++ = '\t'; return true;
	case 'u': return parse_escape_u(p, o);
	default: return false;
	}
}

/* Printable ASCII other than '"' and '\\': copied as is. */
static bool plain(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* True when some byte of w is below n (n <= 128): the classic SWAR test. */
static bool has_less(uint64_t w, unsigned n)
{
	return ((w - ONES * n) & ~w & HIGHS) != 0;
}

static bool has_byte(uint64_t w, unsigned char c)
{
	return has_less(w ^ (ONES * c), 1);
}

/* Past every whole 8-byte word of plain characters from s (at most to end). */
static const char *skip_plain_words(const char *s, const char *end)
{
	uint64_t w;
	while (end - s >= 8) {
		memcpy(&w, s, 8);
		if ((w & HIGHS) || has_less(w, 0x20) || has_byte(w, '"') || has_byte(w, '\\'))
			break;
		s += 8;
	}
	return s;
}

/*
 * A string of plain characters (all of a base64 chunk) in one pass and one copy: every
 * upload chunk is a 256 KiB string, and under TCG the general loop below made uploads
 * several times slower than downloads. False (nothing consumed) for any other string.
 */
static bool parse_plain_string(struct parser *p, const char **out, size_t *out_len)
{
	const char *q = skip_plain_words(p->s + 1, p->end);
	while (q < p->end && plain((unsigned char)*q))
		q++;
	if (q >= p->end || *q != '"')
		return false;
	size_t n = (size_t)(q - p->s - 1);
	char *buf = json_arena_alloc(p->a, n + 1);
	if (!buf) {
		fail(p, JSON_NO_MEMORY);
		return false;
	}
	memcpy(buf, p->s + 1, n);
	buf[n] = '\0';
	p->s = q + 1;
	*out = buf;
	*out_len = n;
	return true;
}

/* p->s is at the opening quote. The decoded form is never longer than the source. */
static bool parse_string(struct parser *p, const char **out, size_t *out_len)
{
	if (parse_plain_string(p, out, out_len))
		return true;
	if (p->err == JSON_NO_MEMORY)
		return false;
	p->s++;
	const char *q = p->s;
	while (q < p->end && *q != '"')
		q += (*q == '\\') ? 2 : 1;
	if (q >= p->end)
		return false;
	char *buf = json_arena_alloc(p->a, (size_t)(q - p->s) + 1);
	if (!buf) {
		fail(p, JSON_NO_MEMORY);
		return false;
	}
	char *o = buf;
	while (p->s < q) {
		unsigned char c = (unsigned char)*p->s;
		if (c == '\\') {
			p->s++;
			if (!parse_escape(p, &o))
				return false;
		} else if (c < 0x20) {
			return false;
		} else {
			size_t n = utf8_seq_len((const unsigned char *)p->s, (size_t)(q - p->s));
			if (n == 0)
				return false;
			memcpy(o, p->s, n);
			o += n;
			p->s += n;
		}
	}
	if (p->s != q) /* an escape ran past the closing quote */
		return false;
	p->s++;
	*o = '\0';
	*out = buf;
	*out_len = (size_t)(o - buf);
	return true;
}

static bool digits(struct parser *p)
{
	const char *start = p->s;
	while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
		p->s++;
	return p->s > start;
}

static struct json *parse_number(struct parser *p)
{
	const char *start = p->s;
	bool neg = false, is_int = true;
	if (*p->s == '-') {
		neg = true;
		p->s++;
	}
	if (p->s < p->end && *p->s == '0')
		p->s++;
	else if (!digits(p))
		return NULL;
	const char *int_end = p->s;
	if (p->s < p->end && *p->s == '.') {
		p->s++;
		is_int = false;
		if (!digits(p))
			return NULL;
	}
	if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
		p->s++;
		is_int = false;
		if (p->s < p->end && (*p->s == '+' || *p->s == '-'))
			p->s++;
		if (!digits(p))
			return NULL;
	}
	struct json *v = node(p, JSON_NUMBER);
	if (!v)
		return NULL;
	uint64_t acc = 0;
	for (const char *d = start + neg; is_int && d < int_end; d++) {
		if (acc > (UINT64_MAX - 9) / 10)
			is_int = false;
		acc = acc * 10 + (uint64_t)(*d - '0');
	}
	if (is_int && acc > (uint64_t)INT64_MAX)
		is_int = false;
	v->u.num.is_int = is_int;
	if (is_int) {
		v->u.num.i = neg ? -(int64_t)acc : (int64_t)acc;
		v->u.num.d = (double)v->u.num.i;
	} else {
		char tmp[128];
		size_t n = (size_t)(p->s - start);
		if (n >= sizeof tmp)
			n = sizeof tmp - 1; /* only precision beyond a double's is lost */
		memcpy(tmp, start, n);
		tmp[n] = '\0';
		v->u.num.d = strtod(tmp, NULL);
	}
	return v;
}

static bool literal(struct parser *p, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
		return false;
	p->s += n;
	return true;
}

static void append(struct json *parent, struct json **tail, struct json *kid)
{
	if (*tail)
		(*tail)->next = kid;
	else
		parent->u.kids.first = kid;
	*tail = kid;
	parent->u.kids.count++;
}

static struct json *parse_array(struct parser *p, int depth)
{
	struct json *arr = node(p, JSON_ARRAY), *tail = NULL;
	if (!arr)
		return NULL;
	p->s++;
	skip_ws(p);
	if (p->s < p->end && *p->s == ']') {
		p->s++;
		return arr;
	}
	for (;;) {
		struct json *v = parse_value(p, depth);
		if (!v)
			return NULL;
		append(arr, &tail, v);
		skip_ws(p);
		if (p->s >= p->end)
			return NULL;
		char c = *p->s++;
		if (c == ']')
			return arr;
		if (c != ',')
			return NULL;
	}
}

static struct json *parse_object(struct parser *p, int depth)
{
	struct json *obj = node(p, JSON_OBJECT), *tail = NULL;
	if (!obj)
		return NULL;
	p->s++;
	skip_ws(p);
	if (p->s < p->end && *p->s == '}') {
		p->s++;
		return obj;
	}
	for (;;) {
		const char *key;
		size_t key_len;
		skip_ws(p);
		if (p->s >= p->end || *p->s != '"' || !parse_string(p, &key, &key_len))
			return NULL;
		skip_ws(p);
		if (p->s >= p->end || *p->s++ != ':')
			return NULL;
		struct json *v = parse_value(p, depth);
		if (!v)
			return NULL;
		v->key = key;
		v->key_len = key_len;
		append(obj, &tail, v);
		skip_ws(p);
		if (p->s >= p->end)
			return NULL;
		char c = *p->s++;
		if (c == '}')
			return obj;
		if (c != ',')
			return NULL;
	}
}

/* depth: how many containers enclose this value. */
static struct json *parse_value(struct parser *p, int depth)
{
	skip_ws(p);
	if (p->s >= p->end)
		return NULL;
	char c = *p->s;
	if (c == '{' || c == '[') {
		if (depth + 1 > MAX_DEPTH) {
			fail(p, JSON_TOO_DEEP);
			return NULL;
		}
		return c == '{' ? parse_object(p, depth + 1) : parse_array(p, depth + 1);
	}
	if (c == '"') {
		struct json *v = node(p, JSON_STRING);
		if (v && !parse_string(p, &v->u.str.s, &v->u.str.len))
			return NULL;
		return v;
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return parse_number(p);
	struct json *v = NULL;
	if (literal(p, "true")) {
		if ((v = node(p, JSON_BOOL)))
			v->u.boolean = true;
	} else if (literal(p, "false")) {
		v = node(p, JSON_BOOL);
	} else if (literal(p, "null")) {
		v = node(p, JSON_NULL);
	}
	return v;
}

struct json *json_parse(struct json_arena *a, const char *text, size_t len, enum json_error *err)
{
	struct parser p = {.s = text, .end = text + len, .a = a, .err = JSON_OK};
	struct json *v = parse_value(&p, 0);
	if (v) {
		skip_ws(&p);
		if (p.s != p.end)
			v = NULL;
	}
	*err = v ? JSON_OK : (p.err != JSON_OK ? p.err : JSON_BAD);
	return v;
}

const struct json *json_get(const struct json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	size_t n = strlen(key);
	for (const struct json *m = obj->u.kids.first; m; m = m->next)
		if (m->key_len == n && memcmp(m->key, key, n) == 0)
			return m;
	return NULL;
}

bool json_int(const struct json *v, int64_t *out)
{
	const double limit = 9007199254740992.0; /* 2^53 */
	if (!v || v->type != JSON_NUMBER)
		return false;
	if (v->u.num.is_int) {
		if (v->u.num.i > (int64_t)limit || v->u.num.i < -(int64_t)limit)
			return false;
		*out = v->u.num.i;
		return true;
	}
	double d = v->u.num.d;
	if (!(d >= -limit && d <= limit) || d != (double)(int64_t)d)
		return false;
	*out = (int64_t)d;
	return true;
}
