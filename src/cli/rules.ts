/**
 * The contract's rules (src/contract/rules.ts) in the shape the CLI checks flags with, so a
 * bad flag is refused before anything is sent, in the flag's own words. Only rules.ts is
 * loaded (it imports nothing): the TypeBox schemas would cost every CLI call its start-up.
 * test/api/cli/rules.test.ts compares every value below with the schemas.
 */
import * as contract from '../contract/rules.js';

/** Sizes (`256M`, `1.5G`, `1K`): the number and unit the contract reads. */
export const readSize = contract.readSize;

/** Names of images and tags of snapshots. */
export const NAME = contract.NAME_RULE;
export const SANDBOX_ID = new RegExp(contract.SANDBOX_ID_PATTERN);
export const LABEL_KEY = new RegExp(contract.LABEL_KEY_PATTERN);
export const ENV_NAME = new RegExp(contract.ENV_NAME_PATTERN);
/** A user name as the contract takes it, or a numeric uid. */
export const USER = new RegExp(contract.USER_PATTERN);

/** Inclusive ranges. */
export const LIMITS = {
  memoryMib: contract.LIMITS.memoryMiB,
  cpus: contract.LIMITS.cpus,
  /** A sandbox's timeout (`create`, `fork`), seconds. */
  sandboxTimeoutS: contract.LIMITS.timeoutS,
  /** A command's timeout (`exec`), milliseconds. */
  execTimeoutMs: contract.LIMITS.execTimeoutMs,
  forkCount: { min: 1, max: contract.FORK_MAX },
  branchFork: { min: 0, max: contract.FORK_MAX },
  poolSize: { min: 0, max: contract.POOL_MAX },
  waitPort: contract.LIMITS.waitPort,
  waitTimeoutS: contract.LIMITS.waitTimeoutS,
  labels: { max: contract.LABELS_MAX.count, valueLength: contract.LABELS_MAX.valueLength },
  env: { max: contract.ENV_MAX.count, valueLength: contract.ENV_MAX.valueLength },
} as const;

/** How each rule reads in an error message. */
export const DESCRIBED = {
  name: contract.NAME_RULE_TEXT,
  sandboxId: 'sbx- and 12 hex digits, like sbx-0123456789ab (see `forkd ps`)',
  labelKey: 'KEY=VALUE, KEY 1 to 63 characters of A-Z, a-z, 0-9, ".", "_", "/" and "-"',
  envName: 'KEY=VALUE, KEY a letter or "_", then letters, digits and "_"',
  user: 'a user name (a-z, 0-9, "_", "-") or a numeric uid',
} as const;
