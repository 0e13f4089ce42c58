/* log.h — one line per notable event on stderr (the serial console when PID 1). */
#ifndef FORKD_LOG_H
#define FORKD_LOG_H

void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
