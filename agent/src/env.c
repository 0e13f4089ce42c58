/* env.c — environment lists; see env.h. Linear search: at most a few thousand entries. */
#include "env.h"

#include "agent.h"

#include <stdlib.h>
#include <string.h>

static long find(const struct env *e, const char *key, size_t key_len)
{
	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->kv[i], key, key_len) == 0 && e->kv[i][key_len] == '=')
			return (long)i;
	return -1;
}

bool env_key_ok(const char *key, size_t len)
{
	return len > 0 && !memchr(key, '=', len) && !memchr(key, '\0', len);
}

bool env_set(struct env *e, const char *key, size_t key_len, const char *val)
{
	size_t vlen = strlen(val);
	char *kv = malloc(key_len + vlen + 2);
	if (!kv)
		return false;
	memcpy(kv, key, key_len);
	kv[key_len] = '=';
	memcpy(kv + key_len + 1, val, vlen + 1);
	long i = find(e, key, key_len);
	if (i >= 0) {
		free(e->kv[i]);
		e->kv[i] = kv;
		return true;
	}
	if (e->n + 2 > e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 16;
		char **p = realloc(e->kv, cap * sizeof *p);
		if (!p) {
			free(kv);
			return false;
		}
		e->kv = p;
		e->cap = cap;
	}
	e->kv[e->n++] = kv;
	e->kv[e->n] = NULL;
	return true;
}

void env_unset(struct env *e, const char *key, size_t key_len)
{
	long i = find(e, key, key_len);
	if (i < 0)
		return;
	free(e->kv[i]);
	memmove(&e->kv[i], &e->kv[i + 1], (e->n - (size_t)i) * sizeof *e->kv);
	e->n--;
}

const char *env_get(const struct env *e, const char *key)
{
	long i = find(e, key, strlen(key));
	return i < 0 ? NULL : e->kv[i] + strlen(key) + 1;
}

bool env_merge(struct env *dst, const struct env *src)
{
	for (size_t i = 0; i < src->n; i++) {
		const char *eq = strchr(src->kv[i], '=');
		if (!env_set(dst, src->kv[i], (size_t)(eq - src->kv[i]), eq + 1))
			return false;
	}
	return true;
}

void env_free(struct env *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->kv[i]);
	free(e->kv);
	*e = (struct env){0};
}

struct env *env_defaults(void)
{
	static struct env defaults;
	static bool ready;
	if (!ready) {
		ready = true;
		env_set(&defaults, "PATH", 4, DEFAULT_PATH);
		env_set(&defaults, "TERM", 4, "xterm");
	}
	return &defaults;
}
