/**
 * `forkd from-image REF --tag TAG [--warm CMD]… [--start CMD]…`: pull → image → snapshot in
 * one verb. The pull is cached by digest (an image already built from that digest is used
 * as it is), and a snapshot TAG already made from that very image is answered as it is, so
 * running it again after nothing changed costs a manifest request.
 */
import type { Command } from 'commander';
import { Snapshot } from '@forkd/sdk';
import { clientConfig, daemonOptions } from './client.js';
import { pullFlags, pullImage, type PullFlags } from './image-oci.js';
import { action } from './output.js';
import { create, createFlags, type CreateFlags } from './snapshot.js';
import { usage } from './parse.js';

export function register(cmd: Command): void {
  daemonOptions(
    createFlags(pullFlags(cmd.argument('<ref>', 'REGISTRY/REPOSITORY[:TAG][@DIGEST]'))),
  ).action(action(fromImage));
}

async function fromImage(ref: string, flags: CreateFlags & PullFlags): Promise<number | void> {
  if (!flags.tag) throw usage('missing --tag TAG (the snapshot name)');
  const image = await pullImage(ref, flags);
  const existing = await Snapshot.get(flags.tag, clientConfig(flags)).catch(() => undefined);
  if (
    existing &&
    existing.info.image === image.name &&
    existing.info.createdAt >= image.createdAt
  ) {
    if (!flags.json) process.stderr.write(`  snapshot ${flags.tag} is already of this image\n`);
    if (flags.json)
      process.stdout.write(
        JSON.stringify({ tag: flags.tag, image: image.name, reused: true }) + '\n',
      );
    else process.stdout.write(`snapshot ${flags.tag}: up to date with ${ref}\n`);
    return;
  }
  return create({ ...flags, image: image.name });
}
