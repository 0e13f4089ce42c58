/* agent.h — constants of protocol 1 (PROTOCOL.md) and the mode the agent runs in. */
#ifndef FORKD_AGENT_H
#define FORKD_AGENT_H

#include "version.h"

#define PROTOCOL_VERSION 1

#define MAX_LINE (1024 * 1024)       /* longest request line, newline excluded */
#define MAX_DEPTH 8                  /* deepest object/array nesting in a request */
#define MAX_LIST 4096                /* argv and env entries */
#define MAX_CHUNK (256 * 1024)       /* largest decoded `data` */
#define RESYNC_BYTE 0xFF

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum agent_mode {
	MODE_PID1,   /* init of a guest: mounts, modules, virtio port */
	MODE_VIRTIO, /* serving the virtio port without PID 1 duties (debugging in a guest) */
	MODE_LISTEN, /* tests: a unix socket on the host */
};

extern enum agent_mode agent_mode;

#endif
