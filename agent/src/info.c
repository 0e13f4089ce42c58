/* info.c — ping and info: liveness and what this agent and kernel are. */
#include "agent.h"
#include "handlers.h"
#include "msg.h"

#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

void handle_ping(const struct request *rq)
{
	if (req_need_id(rq))
		reply_ok(rq->id);
}

void handle_info(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	struct utsname u;
	if (uname(&u) < 0)
		u.release[0] = '\0';
	struct timespec up;
	clock_gettime(CLOCK_BOOTTIME, &up);
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	struct msg m;
	msg_begin(&m, "result", rq->id);
	msg_int(&m, "protocol", PROTOCOL_VERSION);
	msg_str(&m, "agent", AGENT_VERSION);
	msg_str(&m, "kernel", u.release);
	msg_int(&m, "uptime_ms", (int64_t)up.tv_sec * 1000 + up.tv_nsec / 1000000);
	msg_str(&m, "hostname", host);
	msg_send(&m);
}
