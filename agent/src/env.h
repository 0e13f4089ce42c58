/* env.h — environment lists ("K=V" strings): the defaults every exec starts from, which
 * configure edits, and the per-exec merge. */
#ifndef FORKD_ENV_H
#define FORKD_ENV_H

#include <stdbool.h>
#include <stddef.h>

struct env {
	char **kv; /* NULL-terminated when n > 0 */
	size_t n, cap;
};

/* The agent-wide defaults (PATH, TERM and whatever configure set). */
struct env *env_defaults(void);
bool env_set(struct env *e, const char *key, size_t key_len, const char *val);
void env_unset(struct env *e, const char *key, size_t key_len);
const char *env_get(const struct env *e, const char *key);
bool env_merge(struct env *dst, const struct env *src);
void env_free(struct env *e);
/* A usable variable name: non-empty, no '=' or NUL. */
bool env_key_ok(const char *key, size_t len);

#endif
