/* json_arena.c — where parsed JSON lives: bump allocation in 64 KiB blocks, all freed at
 * once after the request is handled, one block kept for the next parse. */
#include "json.h"

#include <stdlib.h>

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	_Alignas(16) char data[];
};

/* The largest block a parse may keep for the next one (an upload chunk's string fits). */
#define SPARE_MAX (512 * 1024)

/* One freed block kept for reuse: every upload chunk parses a 256 KiB string, and a fresh
 * allocation each time cost its page faults again, which under TCG are dear. */
static struct arena_block *spare;

static struct arena_block *new_block(size_t cap)
{
	if (spare && spare->cap >= cap) {
		struct arena_block *b = spare;
		spare = NULL;
		return b;
	}
	struct arena_block *b = malloc(sizeof *b + cap);
	if (b)
		b->cap = cap;
	return b;
}

void *json_arena_alloc(struct json_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct arena_block *b = a->head;
	if (!b || b->cap - b->used < n) {
		b = new_block(n > 65536 ? n : 65536);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

void json_arena_free(struct json_arena *a)
{
	while (a->head) {
		struct arena_block *b = a->head;
		a->head = b->next;
		if (b->cap <= SPARE_MAX && (!spare || b->cap > spare->cap)) {
			free(spare);
			spare = b;
		} else {
			free(b);
		}
	}
}
