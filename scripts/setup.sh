#!/usr/bin/env bash
# forkd host setup: Debian packages, npm dependencies, the build (TypeScript + static C
# agent), then `forkd setup` (guest kernel from Debian's linux-image-cloud-amd64, the
# initramfs, the default busybox image). Idempotent; run as root on Debian/Ubuntu.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(qemu-system-x86 qemu-utils busybox-static e2fsprogs debootstrap musl-tools make gcc
  cpio xz-utils zstd kmod iproute2 util-linux ca-certificates
  # guest networking: the egress policy is nftables rules in each sandbox's namespace
  nftables
  # the Python SDK's type check and wheel build (packages/python)
  mypy python3-build python3-setuptools python3-wheel
  # the terminal-session e2e test drives `forkd shell` through a real terminal
  tmux
  # image pull tests: a real registry on loopback, htpasswd, xattrs on test layers, token certs
  docker-registry apache2-utils attr openssl
  # the web UI's e2e test drives a real headless browser (playwright-core, executablePath)
  chromium
  # the containerd shim's e2e tests run their own containerd (private socket and dirs) and ctr;
  # pods on a CNI network use the reference plugins (bridge, host-local)
  containerd containernetworking-plugins)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
# apt lists are needed both to install and for `apt-get download` of the guest kernel.
echo "==> apt-get update"
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "==> npm ci"
npm ci --no-audit --no-fund --loglevel=error
# The E2B listener's tests drive the real e2b SDK, kept in its own test project.
(cd test/e2b && npm ci --no-audit --no-fund --loglevel=error)
echo "==> build"
npm run -s build
echo "==> forkd setup (guest kernel, initramfs, default image)"
node dist/src/cli/main.js setup
# The eval tests and bench/eval.ts need guest images with python3 (numpy, matplotlib) and
# with nodejs; built once here (debootstrap: a few minutes each, then cached) so the test
# suite never waits. An image already there is kept.
test_image() { # NAME PACKAGES
  [ -e "${FORKD_HOME:-/var/lib/forkd}/images/$1/image.json" ] && return 0
  echo "==> the test image $1 ($2)"
  node dist/src/cli/main.js image build --debian bookworm --name "$1" --packages "$2"
}
if [ "$(id -u)" -eq 0 ]; then
  test_image forkd-test-python python3,python3-numpy,python3-matplotlib
  test_image forkd-test-node nodejs
fi
node dist/src/cli/main.js doctor || true
