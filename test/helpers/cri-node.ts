/**
 * A node for the shim's CRI tests: a test FORKD_HOME, the node's daemon (pods may fork
 * `pod-*` snapshots only: annotations are policy; one pre-started VM per snapshot), a
 * private containerd with the CRI plugin (on a CNI network of the test's when asked), and a
 * CRI client standing in for the kubelet. `stop` ends them all and checks nothing is left.
 */
import { assertNoLeftovers, makeTestHome, type TestHome } from './home.js';
import { startDaemon, type DaemonProcess } from './daemon-process.js';
import { startContainerd, type Containerd, type ContainerdOptions } from './containerd.js';
import { CriClient } from './cri.js';

export interface CriNode {
  home: TestHome;
  daemon: DaemonProcess;
  ctrd: Containerd;
  cri: CriClient;
  stop(): Promise<void>;
}

export async function startCriNode(cni?: ContainerdOptions['cni']): Promise<CriNode> {
  const home = await makeTestHome();
  let daemon: DaemonProcess | undefined;
  let ctrd: Containerd | undefined;
  let cri: CriClient | undefined;
  const stop = async () => {
    cri?.close();
    await ctrd?.stop();
    await daemon?.stop();
    await assertNoLeftovers(home).finally(() => home.cleanup());
  };
  try {
    daemon = await startDaemon(home, ['--pod-snapshots', 'pod-*', '--default-pool', '1']);
    ctrd = await startContainerd(daemon.url, { cri: true, ...(cni ? { cni } : {}) });
    cri = new CriClient(ctrd.address);
    return { home, daemon, ctrd, cri, stop };
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }
}
