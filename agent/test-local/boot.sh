#!/bin/sh
# Boots forkd-agent as PID 1 in a microVM under TCG (by hand, for checking pid1.c):
# initramfs = the agent as /init + virtio modules; disk = busybox ext4 image.
#   agent/test-local/boot.sh WORKDIR [nodisk]
# Leaves QEMU running in the background; WORKDIR/qemu.pid, WORKDIR/agent.sock, console.log.
set -eu
W=$1
KV=6.1.0-57-cloud-amd64
X=${KX:-/tmp/k/x}
K=$X/lib/modules/$KV/kernel
AGENT=$(dirname "$0")/../build/forkd-agent
mkdir -p "$W/initrd/lib/modules" "$W/initrd/etc/forkd" "$W/root/bin" "$W/root/etc" "$W/root/root"
cp "$AGENT" "$W/initrd/init"
: > "$W/initrd/etc/forkd/modules"
for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio \
	drivers/char/virtio_console drivers/block/virtio_blk net/core/failover \
	drivers/net/net_failover drivers/net/virtio_net drivers/char/hw_random/virtio-rng; do
	cp "$K/$m.ko" "$W/initrd/lib/modules/"
	echo "$(basename $m).ko" >> "$W/initrd/etc/forkd/modules"
done
echo "# a comment, then a module that does not exist" >> "$W/initrd/etc/forkd/modules"
echo "nosuch.ko" >> "$W/initrd/etc/forkd/modules"
(cd "$W/initrd" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz)
cp /bin/busybox "$W/root/bin/busybox"
for c in sh ls cat echo sleep head wc sha256sum id hostname env pwd yes mount tee; do
	ln -sf busybox "$W/root/bin/$c"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$W/root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$W/root/etc/group"
rm -f "$W/disk.img"
mkfs.ext4 -q -d "$W/root" "$W/disk.img" 64M
DISK=""
[ "${2:-}" = nodisk ] || DISK="-drive file=$W/disk.img,format=raw,if=none,id=d0 -device virtio-blk-device,drive=d0"
qemu-system-x86_64 -M microvm,x-option-roms=off,isa-serial=on,rtc=on -accel tcg -cpu max -m 256M -smp 1 \
	-nodefaults -no-user-config -display none \
	-chardev file,id=s0,path="$W/console.log" -serial chardev:s0 \
	-kernel "$X/boot/vmlinuz-$KV" -initrd "$W/initrd.gz" \
	-append "console=ttyS0 panic=-1 reboot=t tsc_early_khz=2596098 quiet" \
	-device virtio-serial-device,id=vser0 \
	-chardev socket,id=agent0,path="$W/agent.sock",server=on,wait=off \
	-device virtserialport,bus=vser0.0,chardev=agent0,name=forkd.agent,id=port0 \
	$DISK -daemonize -pidfile "$W/qemu.pid"
