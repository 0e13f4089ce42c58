/**
 * What the parts of the sandbox service share (its lifecycle, endings, idle tiers and guest
 * I/O): the live table and the host services a sandbox holds while it runs. The manager
 * (service.ts) makes one and hands it to each part.
 */
import type { Paths } from '../../config.js';
import type { Limiter } from '../limits.js';
import type { NetworkManager } from '../network/service.js';
import type { LiveTable } from './live.js';
import type { ServiceLog } from '../log.js';

export interface SandboxParts {
  paths: Paths;
  table: LiveTable;
  log: ServiceLog;
  /** The sandboxes' cgroups. */
  limiter: Limiter;
  /** Namespaces, policies and ports; none: every sandbox has network `none`. */
  network?: NetworkManager;
}
