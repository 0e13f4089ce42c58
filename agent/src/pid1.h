/* pid1.h — what the agent does first when it is the guest's init. */
#ifndef FORKD_PID1_H
#define FORKD_PID1_H

/* Console, mounts, modules, the switch to the image disk, hostname, loopback. Every
 * failure is logged and survived: the agent must go on serving whatever happens. */
void pid1_setup(void);

#endif
