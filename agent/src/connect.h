/* connect.h — the `--connect` mode (connect.c). */
#ifndef FORKD_CONNECT_H
#define FORKD_CONNECT_H

#include <stdbool.h>

/* Relays stdin/stdout to the unix socket at path until it closes; the process exit code. */
int run_connect(const char *path);

#endif
