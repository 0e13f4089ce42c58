/**
 * Host-side access to the one error catalog (it lives in the SDK package so the SDK's error
 * classes and the daemon can never disagree).
 */
export { ERROR_CATALOG, ForkdError, isForkdError } from '@forkd/sdk';
export type { ErrorCode } from '@forkd/sdk';
