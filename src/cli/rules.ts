/**
 * The REST contract's limits on what a user types, restated for the CLI so a bad flag is
 * refused before anything is sent, in the flag's own words. The contract itself (TypeBox)
 * is not loaded here: it would cost every CLI call its start-up. test/cli/rules.test.ts
 * compares every value below with src/api/schemas.ts, so the two cannot drift.
 */

/** Names of images and tags of snapshots. */
export const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
export const SANDBOX_ID = /^sbx-[0-9a-f]{12}$/;
export const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$/;
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** A user name as the contract takes it, or a numeric uid. */
export const USER = /^[a-z_][a-z0-9_-]{0,31}$|^[0-9]{1,10}$/;

/** Inclusive ranges. */
export const LIMITS = {
  memoryMib: { min: 64, max: 65536 },
  cpus: { min: 1, max: 64 },
  /** A sandbox's timeout (`create`, `fork`), seconds. */
  sandboxTimeoutS: { min: 1, max: 7 * 24 * 3600 },
  /** A command's timeout (`exec`), milliseconds. */
  execTimeoutMs: { min: 1, max: 24 * 3600 * 1000 },
  forkCount: { min: 1, max: 100 },
  branchFork: { min: 0, max: 100 },
  poolSize: { min: 0, max: 64 },
  waitPort: { min: 1, max: 65535 },
  waitTimeoutS: { min: 1, max: 3600 },
  labels: { max: 64, valueLength: 256 },
  env: { max: 256, valueLength: 32768 },
} as const;

/** How each rule reads in an error message. */
export const DESCRIBED = {
  name: '1 to 63 characters of a-z, 0-9, ".", "_" and "-", starting with a letter or digit',
  sandboxId: 'sbx- and 12 hex digits, like sbx-0123456789ab (see `forkd ps`)',
  labelKey: 'KEY=VALUE, KEY 1 to 63 characters of A-Z, a-z, 0-9, ".", "_", "/" and "-"',
  envName: 'KEY=VALUE, KEY a letter or "_", then letters, digits and "_"',
  user: 'a user name (a-z, 0-9, "_", "-") or a numeric uid',
} as const;
