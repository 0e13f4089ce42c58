/**
 * Where an unpacked or pulled snapshot came from: `origin.json` beside its manifest,
 * written by the pack service (src/services/packs) before the snapshot is renamed into
 * place, shown by `forkd snapshots` and `snapshot info`.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import type { SnapshotOriginT } from '../../contract/schemas.js';
import { snapshotDir } from './files.js';

export const ORIGIN_FILE = 'origin.json';

export async function readOrigin(p: Paths, tag: string): Promise<SnapshotOriginT | undefined> {
  const text = await readFile(join(snapshotDir(p, tag), ORIGIN_FILE), 'utf8').catch(() => '');
  return text ? (JSON.parse(text) as SnapshotOriginT) : undefined;
}
