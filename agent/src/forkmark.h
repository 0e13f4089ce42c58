/* forkmark.h — /run/forkd/sandbox-id, rewritten on every configure (forkmark.c). */
#ifndef FORKD_FORKMARK_H
#define FORKD_FORKMARK_H

#include <stdbool.h>

void fork_mark(const char *id);

#endif
