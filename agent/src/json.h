/* json.h — a small JSON reader (json.c, into an arena: json_arena.c, depth-limited) and writer
 * (jbuf.c, into a growable buffer); UTF-8 checks in utf8.c. */
#ifndef FORKD_JSON_H
#define FORKD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
	enum json_type type;
	const char *key; /* member name inside an object (NUL-terminated) */
	size_t key_len;
	struct json *next; /* next element or member */
	union {
		bool boolean;
		struct {
			double d;
			int64_t i;
			bool is_int; /* an integer literal that fits i exactly */
		} num;
		struct {
			const char *s; /* NUL-terminated, may also contain NULs: see len */
			size_t len;
		} str;
		struct {
			struct json *first;
			size_t count;
		} kids;
	} u;
};

enum json_error { JSON_OK, JSON_BAD, JSON_TOO_DEEP, JSON_NO_MEMORY };

struct json_arena {
	struct arena_block *head;
};

/* Parses exactly one value filling text; NULL and *err on failure. Nodes live in the arena. */
struct json *json_parse(struct json_arena *a, const char *text, size_t len, enum json_error *err);
void json_arena_free(struct json_arena *a);
/* n bytes, 16-aligned, freed with the arena; NULL when out of memory. */
void *json_arena_alloc(struct json_arena *a, size_t n);

/* The member named key, or NULL. */
const struct json *json_get(const struct json *obj, const char *key);
/* An integral number within +-2^53. */
bool json_int(const struct json *v, int64_t *out);

/* Output buffer. On allocation failure `oom` is set and later writes are dropped. */
struct jbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

bool jbuf_reserve(struct jbuf *b, size_t extra);
void jbuf_put(struct jbuf *b, const void *s, size_t n);
void jbuf_puts(struct jbuf *b, const char *s);
/* A quoted JSON string. Invalid UTF-8 becomes U+FFFD, so a reply never holds a 0xFF byte. */
void jbuf_string(struct jbuf *b, const char *s, size_t n);
void jbuf_int(struct jbuf *b, int64_t v);

/* Length (1-4) of the valid UTF-8 sequence at s, 0 when invalid. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

#endif
