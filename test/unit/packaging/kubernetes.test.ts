/**
 * The Kubernetes manifests of packaging/kubernetes parse as YAML and say what the docs
 * say: the RuntimeClass `forkd` names the handler install.sh adds, with a fixed overhead
 * and a node selector the DaemonSet shares; the agent-sandbox template runs under it from
 * a snapshot annotation the node's allow-list of the DaemonSet admits.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';

const DIR = join(process.cwd(), 'packaging', 'kubernetes');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = any;

async function docs(file: string): Promise<Doc[]> {
  const parsed = parseAllDocuments(await readFile(join(DIR, file), 'utf8'));
  for (const d of parsed) assert.deepEqual(d.errors, [], `${file}: ${String(d.errors[0])}`);
  return parsed.map((d) => d.toJS() as Doc);
}

test('the RuntimeClass names the forkd handler, its overhead and a node selector', async () => {
  const [rc] = await docs('runtimeclass.yaml');
  assert.equal(rc.kind, 'RuntimeClass');
  assert.equal(rc.handler, 'forkd');
  assert.match(rc.overhead.podFixed.memory, /^\d+Mi$/);
  assert.deepEqual(rc.scheduling.nodeSelector, { 'forkd.dev/runtime': 'true' });
  const install = await readFile(join(DIR, 'install.sh'), 'utf8');
  assert.match(install, /containerd\.runtimes\.forkd\]/);
});

test('the DaemonSet runs install.sh and the daemon on the RuntimeClass nodes', async () => {
  const all = await docs('daemonset.yaml');
  const ds = all.find((d) => d.kind === 'DaemonSet');
  const [rc] = await docs('runtimeclass.yaml');
  assert.deepEqual(ds.spec.template.spec.nodeSelector, rc.scheduling.nodeSelector);
  assert.match(ds.spec.template.spec.initContainers[0].command[0], /install\.sh$/);
  assert.deepEqual(ds.spec.template.spec.containers[0].command.slice(-1), ['daemon']);
});

test('the agent-sandbox template runs under forkd from an allowed snapshot; the warm pool uses it', async () => {
  const [template, pool] = await docs('agent-sandbox.yaml');
  const pod = template.spec.podTemplate;
  assert.equal(template.kind, 'SandboxTemplate');
  assert.equal(pod.spec.runtimeClassName, 'forkd');
  const snapshot = pod.metadata.annotations['forkd.dev/snapshot'];
  const ds = (await docs('daemonset.yaml')).find((d) => d.kind === 'DaemonSet');
  const allowed = ds.spec.template.spec.containers[0].env.find(
    (e: { name: string }) => e.name === 'FORKD_POD_SNAPSHOTS',
  ).value;
  const { PodPolicy } = await import('../../../src/services/pod-policy.js');
  assert.ok(PodPolicy.parse(allowed).allows(snapshot), `${snapshot} is not in ${allowed}`);
  assert.equal(pool.kind, 'SandboxWarmPool');
  assert.equal(pool.spec.sandboxTemplateRef.name, template.metadata.name);
});
