/**
 * What `mkfs.ext4 -d` cannot take from the host tree, written into the finished image
 * with one `debugfs -w` script: device nodes and fifos, xattrs (file capabilities) — so
 * they do not depend on the host filesystem's xattr support — and, when forkd runs
 * unprivileged, every owner and mode. debugfs splits its arguments at spaces, so a path
 * with a space, quote or newline is left as the host tree had it (noted in docs/images.md).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../util/exec.js';
import type { Fixup } from './layers.js';

const PLAIN = /^[^\s"'\\]+$/;

/** Apply the fixups to an unmounted ext4 image; answers how many paths had to be skipped. */
export async function applyFixups(
  image: string,
  fixups: Map<string, Fixup>,
  scratch: string,
): Promise<number> {
  if (fixups.size === 0) return 0;
  const dir = await mkdtemp(join(scratch, 'fixups-'));
  try {
    const lines: string[] = [];
    let skipped = 0;
    let n = 0;
    for (const [path, fix] of fixups) {
      if (!PLAIN.test(path)) {
        skipped++;
        continue;
      }
      const p = `/${path}`;
      if (fix.device) {
        const d = fix.device;
        lines.push(
          `rm ${p}`,
          d.kind === 'p' ? `mknod ${p} p` : `mknod ${p} ${d.kind} ${d.major} ${d.minor}`,
        );
      }
      if (fix.owner) {
        lines.push(
          `set_inode_field ${p} uid ${fix.owner.uid}`,
          `set_inode_field ${p} gid ${fix.owner.gid}`,
        );
        lines.push(`set_inode_field ${p} mode 0${fix.owner.mode.toString(8)}`);
      }
      for (const [name, value] of fix.xattrs ?? []) {
        if (!PLAIN.test(name)) continue;
        const file = join(dir, `v${n++}`);
        await writeFile(file, value);
        lines.push(`ea_set -f ${file} ${p} ${name}`);
      }
    }
    const script = join(dir, 'script');
    await writeFile(script, lines.join('\n') + '\n');
    await run('debugfs', ['-w', '-f', script, image]);
    return skipped;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
