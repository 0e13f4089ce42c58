/**
 * podman on this host, for the benches that put forkd side by side with containers
 * (vs-containers.ts, build.ts). podman, crun, runsc and buildah are bench-only: not in
 * scripts/setup.sh. crun cannot start here while the cgroup2 hierarchy at
 * /sys/fs/cgroup/unified holds a controller (hybrid mode), so podman commands that run a
 * container with crun go in a private mount namespace with that hierarchy unmounted; the
 * host's mounts are untouched.
 */
import { spawnSync } from 'node:child_process';

/** Limits a container may set without privileges here (raising them is refused). */
export const PODMAN_ULIMITS = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096'];

/** Throw naming the apt packages when one of `tools` is not on PATH. */
export function requireTools(tools: string[]): void {
  for (const tool of tools) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) {
      throw new Error(`${tool} is not installed (bench-only: apt install ${tools.join(' ')})`);
    }
  }
}

/** A shell in a private mount namespace without the hybrid cgroup2 mount (for crun). */
export function unifiedHidden(script: string): [string, string[]] {
  const sh = `umount -l /sys/fs/cgroup/unified 2>/dev/null; ${script}`;
  return ['unshare', ['--mount', '--propagation', 'private', 'sh', '-c', sh]];
}

/**
 * Import a forkd image's rootfs.ext4 into podman as `ref`: mounted read-only in a private
 * mount namespace (gone, with its loop device, when the shell ends) and streamed as a tar.
 */
export function importExt4(rootfs: string, ref: string): void {
  const script = [
    'set -e',
    'd=$(mktemp -d)',
    `mount -o loop,ro '${rootfs}' "$d"`,
    `rc=0; tar -C "$d" -c . | podman import -q - '${ref}' >/dev/null || rc=$?`,
    'umount "$d"; rmdir "$d"; exit $rc',
  ].join('\n');
  const r = spawnSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script]);
  if (r.status !== 0) throw new Error(`podman import of ${rootfs}: ${r.stderr}`);
}

/** Run podman with `args` (in the crun wrapper); stdout, or throw with its stderr. */
export function podman(args: string[]): string {
  const quoted = args.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const r = spawnSync(...unifiedHidden(`exec podman ${quoted}`), {
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`podman ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return r.stdout.toString();
}
