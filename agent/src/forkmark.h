/* forkmark.h — /run/forkd/sandbox-id, rewritten on every configure (forkmark.c). */
#ifndef FORKD_FORKMARK_H
#define FORKD_FORKMARK_H

#include <stdbool.h>

/* At boot, in the final root: /run/forkd as a small tmpfs. */
void fork_mark_setup(void);
void fork_mark(const char *id);

#endif
