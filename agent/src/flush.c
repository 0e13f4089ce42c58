/* flush.c — write the guest's dirty page cache to its disks, asked by the host right before
 * it captures a snapshot: a snapshot taken with dirty pages hands their writeback and
 * journal commit to every fork, ~5 s after its restore, and under TCG that costs each child
 * the translated code of the whole disk write path (~2.5 MiB, docs/idle.md). */
#include "handlers.h"
#include "msg.h"

#include <unistd.h>

void handle_flush(const struct request *rq)
{
	if (!req_need_id(rq))
		return;
	sync();
	reply_ok(rq->id);
}
