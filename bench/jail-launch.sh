#!/bin/bash
# What the jail costs a QEMU start, on its own (docs/security.md "Measured"): the launcher
# execs `true` 40 times with and without --jail, twice each, interleaved. CPU time (user +
# sys) is reported beside wall time: on a shared, loaded host the wall time is mostly
# waiting for a core, the CPU time is what the jail adds. Run as root after `npm run build`.
set -euo pipefail
L="$(dirname "$0")/../native/build/forkd-qemu-exec"
d=$(mktemp -d)
trap 'rmdir "$d"' EXIT
uptime
for mode in plain jail plain jail; do
  args=(--no-thp)
  [ "$mode" = jail ] && args+=(--jail --rw "$d")
  /usr/bin/time -f "$mode: 40 launches of true: wall %e s, CPU user %U s + sys %S s" \
    bash -c "for i in \$(seq 40); do $L ${args[*]} -- true; done"
done
