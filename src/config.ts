/**
 * Where forkd keeps its state (DESIGN.md "State on disk") and host-wide settings, all
 * read from the environment so tests can point a run at their own FORKD_HOME.
 */
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Resolved paths under FORKD_HOME. */
export interface Paths {
  home: string;
  kernels: string;
  images: string;
  snapshots: string;
  sandboxes: string;
  /** The built guest agent binary and initramfs, per agent build. */
  guest: string;
  db: string;
}

/** FORKD_HOME, else /var/lib/forkd as root, else ~/.local/share/forkd. */
export function forkdHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FORKD_HOME) return env.FORKD_HOME;
  if (process.getuid?.() === 0) return '/var/lib/forkd';
  return join(homedir(), '.local', 'share', 'forkd');
}

/** Paths of a forkd home (default: the one of this process). */
export function paths(home: string = forkdHome()): Paths {
  return {
    home,
    kernels: join(home, 'kernels'),
    images: join(home, 'images'),
    snapshots: join(home, 'snapshots'),
    sandboxes: join(home, 'sandboxes'),
    guest: join(home, 'guest'),
    db: join(home, 'forkd.db'),
  };
}

/** Accelerator choice: FORKD_ACCEL=kvm|tcg|auto (auto probes /dev/kvm). */
export function accelSetting(env: NodeJS.ProcessEnv = process.env): 'kvm' | 'tcg' | 'auto' {
  const v = env.FORKD_ACCEL ?? 'auto';
  return v === 'kvm' || v === 'tcg' ? v : 'auto';
}

/** The repository root (the agent and the native helpers are built there by `npm run build`). */
export function repoRoot(): string {
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..');
}
