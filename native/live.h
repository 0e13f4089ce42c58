/*
 * Live capture: freeze a stopped VMM's RAM with a kernel copy-on-write fork of the VMM
 * process, then copy the written pages from the frozen fork while the VM runs again.
 */
#ifndef FORKD_LIVE_H
#define FORKD_LIVE_H

/* forkd-capture live PID VSTART VEND FILEOFF DST (line protocol on stdin/stdout). */
int live_capture(char **argv);
/* forkd-capture live-cleanup PID VSTART VEND: reap frozen forks a killed copier left. */
int live_cleanup(char **argv);
/* forkd-capture live-probe: run the whole live sequence against a test process. */
int live_probe(void);

#endif
