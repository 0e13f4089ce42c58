/**
 * The QEMU command line of a forkd microVM (notes/qemu-measurements.md §1): microvm, no
 * defaults, RAM share=off over a base file, the agent's virtio-serial port, one qcow2 disk.
 * Boots get -kernel/-initrd/-append; restores get -incoming defer and no kernel.
 */

import type { GuestNet, VmNet, VmSpec } from '../vmm.js';

export type { VmNet, VmSpec } from '../vmm.js';

/** Every guest's address plan (slirp's defaults), the same in every fork. */
export const GUEST_NET: GuestNet = {
  address: '10.0.2.15/24',
  gateway: '10.0.2.2',
  dns: '10.0.2.3',
  mac: '52:54:00:12:34:56',
} as const;

/** The NIC's arguments: the device model must match across a snapshot and its forks. */
function netArgs(net: VmNet): string[] {
  const restrict = net.restrict ? ',restrict=on' : '';
  return [
    '-netdev',
    `user,id=net0,ipv6=off,net=10.0.2.0/24${restrict}`,
    '-device',
    `virtio-net-device,netdev=net0,id=vnet0,mac=${GUEST_NET.mac}`,
  ];
}

/** Socket and log paths inside a VM's directory. */
export function vmFiles(dir: string) {
  return {
    qmp: `${dir}/qmp.sock`,
    agent: `${dir}/agent.sock`,
    console: `${dir}/console.log`,
    log: `${dir}/qemu.log`,
    pid: `${dir}/qemu.pid`,
  };
}

/** The guest kernel command line: quiet serial console, panic → exit, TCG TSC fix. */
export function kernelAppend(spec: NonNullable<VmSpec['boot']>, accel: 'kvm' | 'tcg'): string {
  const parts = ['console=ttyS0', 'quiet', 'panic=-1', 'reboot=t', 'forkd.root=/dev/vda'];
  // Under TCG ~30 % of microvm boots hang calibrating the TSC without this.
  if (accel === 'tcg' && spec.tscKhz) parts.push(`tsc_early_khz=${spec.tscKhz}`);
  if (spec.extraAppend) parts.push(spec.extraAppend);
  return parts.join(' ');
}

/**
 * The block node of the disk layer a VM starts on, named after its file (overlay.qcow2 →
 * disk0, overlay-N.qcow2 → diskN, as disk.ts names layers): a sandbox restored from its
 * hibernation onto a later layer must keep the node its file is found by.
 */
export function diskNodeOf(file: string): string {
  return `disk${/overlay-(\d+)\.qcow2$/.exec(file)?.[1] ?? 0}`;
}

/**
 * The device set of the VMs forkd makes now. 1: microvm's defaults; 2 (12-04): without its
 * second IOAPIC (`ioapic2=off`, -0.7 MiB of QEMU heap per VM; the guest's interrupts are
 * all on the first one). A VM restored from state captured under 1 gets 1 again (QEMU
 * refuses a device state with a device it does not have).
 */
export const DEVICE_SET = 2;

/** The `-M` value of a device set. */
function machineArg(deviceSet = 1): string {
  const base = 'microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem';
  return deviceSet >= 2 ? `${base},ioapic2=off` : base;
}

/** The device set a running QEMU was started with, from its argv (an adopted VM). */
export function deviceSetOf(argv: string[]): number {
  const m = argv[argv.indexOf('-M') + 1] ?? '';
  return m.split(',').includes('ioapic2=off') ? 2 : 1;
}

/** `-accel`'s value: KVM, or TCG with its translation buffer capped when asked. */
export function accelArg(spec: Pick<VmSpec, 'accel' | 'tbMiB'>): string {
  if (spec.accel === 'kvm') return 'kvm';
  return spec.tbMiB ? `tcg,tb-size=${spec.tbMiB}` : 'tcg';
}

/** Build argv (without the binary) for qemu-system-x86_64. */
export function buildQemuArgs(spec: VmSpec): string[] {
  const f = vmFiles(spec.dir);
  const mem = `${spec.memoryMiB}M`;
  const args = [
    '-M',
    machineArg(spec.deviceSet),
    '-accel',
    accelArg(spec),
    '-cpu',
    spec.accel === 'kvm' ? 'host' : 'max',
    '-m',
    mem,
    '-smp',
    String(spec.cpus),
    '-nodefaults',
    '-no-user-config',
    '-display',
    'none',
    '-no-reboot',
    '-chardev',
    `file,id=con0,path=${f.console}`,
    '-serial',
    'chardev:con0',
    '-object',
    `memory-backend-file,id=mem,size=${mem},mem-path=${spec.memPath},share=off`,
    '-qmp',
    `unix:${f.qmp},server=on,wait=off`,
    '-pidfile',
    f.pid,
    '-device',
    'virtio-serial-device,id=vser0',
    '-chardev',
    `socket,id=agent0,path=${f.agent},server=on,wait=off`,
    '-device',
    'virtserialport,bus=vser0.0,chardev=agent0,name=forkd.agent,id=port0',
    '-blockdev',
    `driver=file,filename=${spec.disk},node-name=file0,cache.direct=off`,
    '-blockdev',
    `driver=qcow2,file=file0,node-name=${diskNodeOf(spec.disk)}`,
    '-device',
    `virtio-blk-device,drive=${diskNodeOf(spec.disk)},id=vblk0`,
    '-device',
    'virtio-rng-device,id=rng0',
    '-global',
    'migration.send-configuration=off',
  ];
  if (spec.boot) {
    args.push('-kernel', spec.boot.kernel, '-initrd', spec.boot.initramfs);
    args.push('-append', kernelAppend(spec.boot, spec.accel));
  }
  if (spec.net) args.push(...netArgs(spec.net));
  if (spec.incoming) args.push('-incoming', 'defer');
  return args;
}
