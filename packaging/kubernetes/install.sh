#!/bin/sh
# Install forkd as a containerd runtime on a Kubernetes node (docs/kubernetes.md), as Kata's
# deploy does: put containerd-shim-forkd-v2 on containerd's PATH, add the `forkd` runtime
# handler to containerd's CRI config (runtime_type io.containerd.forkd.v2, pod annotations
# forkd.dev/*), and restart containerd. Idempotent: a config that names the runtime already
# is left alone. The DaemonSet (daemonset.yaml) runs this same script.
set -eu

CONFIG=/etc/containerd/config.toml
BIN_DIR=/usr/local/bin
RESTART='systemctl restart containerd'
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM_JS="$HERE/../../dist/src/shim/main.js"

usage() {
  cat <<USAGE
usage: install.sh [--config FILE] [--bin-dir DIR] [--restart CMD | --no-restart]
  --config FILE   containerd's config (default $CONFIG; written with
                  \`containerd config default\` first if it does not exist)
  --bin-dir DIR   where the shim goes, on containerd's PATH (default $BIN_DIR)
  --restart CMD   how to restart containerd (default: $RESTART)
  --no-restart    leave containerd running with its old config
USAGE
}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=${2:?--config needs a file}; shift 2 ;;
    --bin-dir) BIN_DIR=${2:?--bin-dir needs a directory}; shift 2 ;;
    --restart) RESTART=${2:?--restart needs a command}; shift 2 ;;
    --no-restart) RESTART=; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option $1" ;;
  esac
done

[ -f "$SHIM_JS" ] || die "no shim at $SHIM_JS: run this script from an installed forkd (or a built clone: npm run build)"
NODE=$(command -v node) || die "node is not on PATH: install Node.js 20 or newer"

# 1. The shim: a wrapper naming node and the shim by absolute path, since containerd's PATH
#    (systemd's) may have neither.
mkdir -p "$BIN_DIR"
cat > "$BIN_DIR/.containerd-shim-forkd-v2.tmp" <<SHIM
#!/bin/sh
exec $NODE $(cd "$(dirname "$SHIM_JS")" && pwd)/main.js "\$@"
SHIM
chmod 755 "$BIN_DIR/.containerd-shim-forkd-v2.tmp"
mv "$BIN_DIR/.containerd-shim-forkd-v2.tmp" "$BIN_DIR/containerd-shim-forkd-v2"
echo "installed $BIN_DIR/containerd-shim-forkd-v2"

# 2. The runtime config.
if [ ! -f "$CONFIG" ]; then
  command -v containerd >/dev/null || die "containerd is not installed (apt-get install containerd)"
  mkdir -p "$(dirname "$CONFIG")"
  containerd config default > "$CONFIG"
  echo "wrote containerd's default config to $CONFIG"
fi
if grep -q 'io.containerd.forkd.v2' "$CONFIG"; then
  echo "$CONFIG names the forkd runtime already: left as it is"
else
  grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*2' "$CONFIG" ||
    die "$CONFIG is not a version 2 config (containerd 1.5 to 1.7): add the runtime by hand (docs/kubernetes.md)"
  if grep -Eq '^[[:space:]]*disabled_plugins[[:space:]]*=.*"(io\.containerd\.grpc\.v1\.)?cri"' "$CONFIG"; then
    die "$CONFIG disables the CRI plugin (disabled_plugins): Kubernetes needs it; remove \"cri\" from that list and rerun"
  fi
  cp "$CONFIG" "$CONFIG.forkd-backup"
  tmp="$CONFIG.forkd-tmp"
  cp "$CONFIG" "$tmp"
  {
    echo ''
    echo '# forkd: pods with runtimeClassName forkd run as forked microVMs (forkd install.sh)'
    # Naming one runtime replaces containerd's built-in table: keep runc if it was implicit.
    if ! grep -q 'containerd.runtimes.runc\]' "$CONFIG"; then
      echo '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'
      echo '  runtime_type = "io.containerd.runc.v2"'
    fi
    echo '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.forkd]'
    echo '  runtime_type = "io.containerd.forkd.v2"'
    echo '  pod_annotations = ["forkd.dev/*"]'
  } >> "$tmp"
  mv "$tmp" "$CONFIG"
  echo "added the forkd runtime handler to $CONFIG (the old one is $CONFIG.forkd-backup)"
fi

# 3. containerd reads its config at start only.
if [ -n "$RESTART" ]; then
  sh -c "$RESTART" || die "restarting containerd failed ($RESTART)"
  echo "restarted containerd"
else
  echo "containerd not restarted (--no-restart): restart it to use the forkd runtime"
fi
