/**
 * Command lines for /bin/sh built from argv: what a terminal session runs (it takes one
 * string), for `forkd exec -t`/`shell` and the containerd shim's terminal processes alike.
 */

/** One word for /bin/sh, quoted so nothing in it is special. */
export function shQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** `K=V … REST`: an environment for one command line. */
export function envPrefix(env: Record<string, string>, rest: string): string {
  const assigns = Object.entries(env).map(([k, v]) => `${k}=${shQuote(v)} `);
  return `${assigns.join('')}${rest}`;
}

/** argv (and env) as the command line a terminal session runs: exec'd, so it is the session. */
export function shellCommand(argv: string[], env: Record<string, string> = {}): string {
  return envPrefix(env, `exec ${argv.map(shQuote).join(' ')}`);
}
