/**
 * The signals a command can be sent, by name (the agent knows them by name). One list for
 * every layer: the SDK's types, the daemon's contract (src/contract/rules.ts) and the
 * containerd shim take it from here. Exported as `@forkd/sdk/signals`; imports nothing.
 */
export const SIGNALS = [
  'SIGKILL',
  'SIGTERM',
  'SIGINT',
  'SIGHUP',
  'SIGQUIT',
  'SIGUSR1',
  'SIGUSR2',
  'SIGSTOP',
  'SIGCONT',
] as const;

/** A signal a command can be sent. */
export type SignalName = (typeof SIGNALS)[number];
