/**
 * `forkd setup`: everything under FORKD_HOME a first boot needs — the guest kernel, the
 * initramfs around the agent, and the default `busybox` image (works offline).
 */
import type { Command } from 'commander';
import { paths } from '../config.js';
import { buildBusyboxImage, DEFAULT_IMAGE, listImages, setupGuest } from '../services/local.js';
import { action, printJson } from './output.js';

export function register(cmd: Command): void {
  cmd
    .option('--kernel-deb <path>', 'use this linux-image .deb instead of downloading one with apt')
    .option('--force', 'reinstall the kernel and rebuild the initramfs')
    .option('--json', 'machine-readable output')
    .action(
      action(async (opts: { kernelDeb?: string; force?: boolean; json?: boolean }) => {
        const p = paths();
        const say = (line: string) => {
          if (!opts.json) process.stderr.write(`  ${line}\n`);
        };
        const guest = await setupGuest(p, { kernelDeb: opts.kernelDeb, force: opts.force }, say);
        const images = await listImages(p);
        if (!images.some((i) => i.name === DEFAULT_IMAGE)) {
          say(`building the default image "${DEFAULT_IMAGE}"`);
          await buildBusyboxImage(p, { name: DEFAULT_IMAGE });
        }
        if (opts.json) printJson({ home: p.home, guest });
        else
          process.stdout.write(
            `forkd is set up in ${p.home} (guest kernel ${guest.kernelVersion})\n`,
          );
      }),
    );
}
