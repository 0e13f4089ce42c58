/**
 * @forkd/sdk — the TypeScript client of forkd. Zero runtime dependencies.
 */
export { ERROR_CATALOG, ForkdError, isForkdError } from './errors.js';
export type { ErrorCode } from './errors.js';
export { VERSION } from './version.js';
