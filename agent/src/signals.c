/* signals.c — signal names as the protocol spells them ("SIGTERM"), both ways, for the exec
 * and pty families' signal requests and their exit reports. */
#include "handlers.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},     {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL},
	{"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},   {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},
	{"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1},   {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
	{"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM},   {"SIGTERM", SIGTERM}, {"SIGSTKFLT", SIGSTKFLT},
	{"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT},   {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP},
	{"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU},   {"SIGURG", SIGURG},   {"SIGXCPU", SIGXCPU},
	{"SIGXFSZ", SIGXFSZ}, {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
	{"SIGIO", SIGIO},     {"SIGPWR", SIGPWR},     {"SIGSYS", SIGSYS},
};

int signal_number(const char *name)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcmp(signals[i].name, name) == 0)
			return signals[i].sig;
	return -1;
}

const char *signal_name(int sig, char *buf, size_t len)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (signals[i].sig == sig)
			return signals[i].name;
	snprintf(buf, len, "SIG%d", sig);
	return buf;
}
