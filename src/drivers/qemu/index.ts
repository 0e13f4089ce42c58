/**
 * The QEMU driver's one entry: `qemu` implements the VMM seam (drivers/vmm.ts) with the
 * modules of this folder, and the daemon-wide settings (confinement, tuning) are set here.
 * Only the wiring (services/index.ts) imports it; services see `Vmm` and `VmHandle`, never a
 * QEMU module, and lint keeps it so. Handles services pass back are this driver's `Vm`s.
 */
import { ForkdError } from '../../errors.js';
import type { DiskLayer, Vmm, VmHandle } from '../vmm.js';
import { detectAccel, hostTscKhz } from './accel.js';
import { captureVm, liveCaptureBytes } from './capture.js';
import { DEVICE_SET, GUEST_NET, vmFiles } from './cmdline.js';
import { canSwitchUser, confinementOf, confinementSetting } from './confine.js';
import {
  createLayerOver,
  createOverlay,
  discardLayer,
  foldBack,
  foldUnderTop,
  isLayerFile,
  nextLayer,
  openFiles,
  readChain,
  rebaseOnto,
  setBacking,
  topLayer,
  type Layer,
} from './disk.js';
import { diffOver, fileExtents, overlayInto, sparseCopy } from './helper.js';
import { addHostForward, removeHostForward } from './hostfwd.js';
import { probeLive, reapLiveForks } from './live.js';
import { isQemuOf, killVerifiedQemu, QEMU_BINARY, readQemuPid, Vm } from './vm.js';

export { configureConfinement, protectHome } from './confine.js';
export { configureTuning, parseMerge, parseTbMiB, vmTuning, type VmTuning } from './tuning.js';

/** The QEMU `Vm` behind a handle (a handle of another driver is a wiring mistake). */
function own(vm: VmHandle): Vm {
  if (!(vm instanceof Vm)) throw new ForkdError('internal', 'not a VM of the QEMU driver');
  return vm;
}

/** A layer's QMP node is its name outside this driver. */
const toLayer = (l: DiskLayer): Layer => ({ node: l.name, file: l.file, size: l.size });
const fromLayer = (l: Layer): DiskLayer => ({ name: l.node, file: l.file, size: l.size });

export const qemu: Vmm = {
  name: 'qemu',
  binary: QEMU_BINARY,
  machine: 'microvm', // cmdline.ts
  guestNet: GUEST_NET,
  deviceSet: DEVICE_SET,
  accel: () => detectAccel(),
  hostTscKhz,
  filesOf: vmFiles,
  start: (spec, opts) => Vm.start(spec, opts),
  adopt: (spec, pid, opts) => Vm.adopt(spec, pid, opts),
  readPid: readQemuPid,
  isVmOf: isQemuOf,
  killVerified: killVerifiedQemu,
  capture: (vm, files, { disk, ...opts }) =>
    captureVm(own(vm), files, {
      ...opts,
      ...(disk ? { disk: { top: toLayer(disk.top), next: toLayer(disk.next) } } : {}),
    }),
  liveCaptureBytes: (vm) => liveCaptureBytes(own(vm)),
  probeLive,
  reapLiveForks: (vm) => reapLiveForks(own(vm)),
  addPortForward: (vm, bind, hostPort, guestPort) =>
    addHostForward(own(vm), bind, hostPort, guestPort),
  removePortForward: (vm, bind, hostPort) => removeHostForward(own(vm), bind, hostPort),
  confinement: {
    enabled: () => confinementSetting().enabled,
    ownUser: canSwitchUser,
    of: confinementOf,
  },
  disks: {
    createOverlay,
    createLayerOver,
    rebaseOnto,
    setBacking,
    readChain,
    isLayerFile,
    top: async (vm) => fromLayer(await topLayer(own(vm))),
    next: (vm, top) => fromLayer(nextLayer(own(vm), toLayer(top))),
    foldBack: (vm, frozen) => foldBack(own(vm), frozen),
    foldUnderTop: (vm, header, below) => foldUnderTop(own(vm), header, below),
    discard: (vm, layer) => discardLayer(own(vm), toLayer(layer)),
    openFiles: (vm) => openFiles(own(vm)),
  },
  memory: { diffOver, overlayInto, sparseCopy, fileExtents },
};
