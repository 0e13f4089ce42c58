/**
 * @forkd/sdk — the TypeScript client of forkd. Zero runtime dependencies: node:http for
 * the daemon's unix socket and http(s) for a remote one.
 *
 * @example
 * import { Sandbox, Snapshot } from '@forkd/sdk';
 * await using sbx = await Sandbox.create({ image: 'busybox' });
 * console.log((await sbx.commands.run('echo hi')).stdout);
 * const warm = await Snapshot.create({ tag: 'warm', image: 'busybox', warm: ['touch /ready'] });
 * const { sandboxes } = await warm.fork({ n: 4 });
 * const { snapshot } = await sandboxes[0].branch({ tag: 'step-2', fork: 2 });
 */
export * from './errors.js';
export { Forkd, type CallOptions, type LineageOptions } from './client.js';
export { Sandbox } from './sandbox.js';
export type { KillOptions } from './sandbox-requests.js';
export type {
  SandboxCreateOptions,
  SandboxListOptions,
  SandboxOptions,
  SandboxUpdate,
} from './sandbox.js';
export type { BranchMode, BranchOptions, BranchResult } from './branch.js';
export { Snapshot } from './snapshots.js';
export type {
  ForkFailure,
  ForkOptions,
  ForkResult,
  SnapshotCreateOptions,
  SnapshotRemoveOptions,
} from './snapshots.js';
export { Commands, CommandHandle } from './commands.js';
export { SIGNALS } from './signals.js';
export type { CommandOptions, CommandSignal, StartOptions } from './commands.js';
export { Files } from './files.js';
export { Contexts, Execution, Result } from './contexts.js';
export type {
  ContextInfo,
  ContextLanguage,
  EvalForkResult,
  EvalOptions,
  ExecutionError,
  RunCodeOptions,
} from './contexts.js';
export type { WriteInfo, WriteOptions } from './files.js';
export { Pty, PtyHandle, PtyDetachedError } from './pty.js';
export type {
  PtyConnectOptions,
  PtyCreateOptions,
  PtyExit,
  PtySessionInfo,
  PtySize,
} from './pty.js';
export { Images } from './images.js';
export { Packs } from './packs.js';
export { Builds } from './builds.js';
export type { BuildEvent, BuildOptions, BuildResult } from './builds.js';
export { tarOf } from './tar.js';
export type {
  CacheEntry,
  CacheInfo,
  InstallInfo,
  InstallOptions,
  PackCallOptions,
  PackInfo,
  PushInfo,
  PushOptions,
} from './packs.js';
export type {
  BootSnapshotOptions,
  ImageCreateOptions,
  ImagePullOptions,
  ImageImportOptions,
} from './images.js';
export { defaultSocketPath, parseUrl, resolveConfig } from './config.js';
export type { ClientConfig, Endpoint, ResolvedConfig } from './config.js';
export type {
  CommandResult,
  EntryInfo,
  ImageInfo,
  ImageConfigInfo,
  BootSnapshotInfo,
  ImageProgress,
  LineageKind,
  LineageNode,
  LimitsOptions,
  PoolBudgetInfo,
  PoolInfo,
  SandboxInfo,
  SandboxLimits,
  SandboxUsage,
  SandboxConfinement,
  SandboxState,
  SandboxTier,
  SandboxIdle,
  IdleOptions,
  SnapshotFileInfo,
  SnapshotInfo,
  SnapshotMemoryInfo,
  SnapshotOrigin,
  SnapshotState,
  VerifyReport,
  VersionInfo,
  NetworkMode,
  EgressPolicy,
  Egress,
  PublishedPort,
  SandboxNetwork,
} from './types.js';
export { VERSION } from './version.js';
