/**
 * A CRI client standing in for the kubelet: the `runtime.v1` RuntimeService and
 * ImageService over gRPC (`@grpc/grpc-js`) on containerd's socket, to its CRI plugin. The
 * messages are written here (protobufjs, only the fields the tests use, field numbers of
 * the Kubernetes CRI API); names stay snake_case as in the proto. Errors are gRPC errors:
 * `details` carries containerd's message, as the kubelet puts it in the pod's events.
 */
import grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { msg } from '../../src/shim/proto.js';

const M = (name: string) => `runtime.v1.${name}`;

const root = protobuf.Root.fromJSON({
  nested: {
    runtime: {
      nested: {
        v1: {
          nested: {
            Empty: msg(),
            VersionRequest: msg(['version', 'string']),
            VersionResponse: msg(
              ['version', 'string'],
              ['runtime_name', 'string'],
              ['runtime_version', 'string'],
              ['runtime_api_version', 'string'],
            ),
            PodSandboxMetadata: msg(
              ['name', 'string'],
              ['uid', 'string'],
              ['namespace', 'string'],
              ['attempt', 'uint32'],
            ),
            NamespaceOption: msg(['network', 'int32'], ['pid', 'int32'], ['ipc', 'int32']),
            LinuxSandboxSecurityContext: msg(['namespace_options', 'runtime.v1.NamespaceOption']),
            LinuxPodSandboxConfig: msg(
              ['cgroup_parent', 'string'],
              ['security_context', 'runtime.v1.LinuxSandboxSecurityContext'],
            ),
            PodSandboxConfig: msg(
              ['metadata', 'runtime.v1.PodSandboxMetadata', 1],
              ['hostname', 'string', 2],
              ['log_directory', 'string', 3],
              ['labels', 'map', 6],
              ['annotations', 'map', 7],
              ['linux', 'runtime.v1.LinuxPodSandboxConfig', 8],
            ),
            RunPodSandboxRequest: msg(
              ['config', 'runtime.v1.PodSandboxConfig'],
              ['runtime_handler', 'string'],
            ),
            RunPodSandboxResponse: msg(['pod_sandbox_id', 'string']),
            PodSandboxIdRequest: msg(['pod_sandbox_id', 'string'], ['verbose', 'bool']),
            PodSandboxNetworkStatus: msg(['ip', 'string']),
            PodSandboxStatus: msg(
              ['id', 'string', 1],
              ['state', 'int32', 3],
              ['network', 'runtime.v1.PodSandboxNetworkStatus', 5],
            ),
            PodSandboxStatusResponse: msg(
              ['status', 'runtime.v1.PodSandboxStatus'],
              ['info', 'map'],
            ),
            PodSandbox: msg(['id', 'string', 1], ['state', 'int32', 3]),
            ListPodSandboxResponse: msg(['items', 'runtime.v1.PodSandbox[]']),
            ContainerMetadata: msg(['name', 'string'], ['attempt', 'uint32']),
            ImageSpec: msg(['image', 'string']),
            KeyValue: msg(['key', 'string'], ['value', 'string']),
            ContainerConfig: msg(
              ['metadata', 'runtime.v1.ContainerMetadata', 1],
              ['image', 'runtime.v1.ImageSpec', 2],
              ['command', 'string[]', 3],
              ['args', 'string[]', 4],
              ['working_dir', 'string', 5],
              ['envs', 'runtime.v1.KeyValue[]', 6],
              ['labels', 'map', 9],
              ['annotations', 'map', 10],
              ['log_path', 'string', 11],
            ),
            CreateContainerRequest: msg(
              ['pod_sandbox_id', 'string'],
              ['config', 'runtime.v1.ContainerConfig'],
              ['sandbox_config', 'runtime.v1.PodSandboxConfig'],
            ),
            CreateContainerResponse: msg(['container_id', 'string']),
            // StopContainerRequest's timeout (int64) and ContainerStatusRequest's verbose
            // (bool) are both field 2, a varint: one message serves both.
            ContainerIdRequest: msg(['container_id', 'string'], ['timeout_or_verbose', 'int64']),
            ContainerStatus: msg(
              ['id', 'string', 1],
              ['state', 'int32', 3],
              ['started_at', 'int64', 5],
              ['finished_at', 'int64', 6],
              ['exit_code', 'int32', 7],
              ['reason', 'string', 10],
              ['message', 'string', 11],
              ['log_path', 'string', 15],
            ),
            ContainerStatusResponse: msg(['status', 'runtime.v1.ContainerStatus']),
            Container: msg(
              ['id', 'string', 1],
              ['pod_sandbox_id', 'string', 2],
              ['state', 'int32', 6],
            ),
            ListContainersResponse: msg(['containers', 'runtime.v1.Container[]']),
            ExecSyncRequest: msg(
              ['container_id', 'string'],
              ['cmd', 'string[]'],
              ['timeout', 'int64'],
            ),
            ExecSyncResponse: msg(['stdout', 'bytes'], ['stderr', 'bytes'], ['exit_code', 'int32']),
            ImageStatusRequest: msg(['image', 'runtime.v1.ImageSpec'], ['verbose', 'bool']),
            Image: msg(['id', 'string'], ['repo_tags', 'string[]']),
            ImageStatusResponse: msg(['image', 'runtime.v1.Image']),
          },
        },
      },
    },
  },
});

/** CRI's NamespaceMode: POD (the pod's own, CNI-networked) or NODE (the host's). */
export const NAMESPACE = { pod: 0, container: 1, node: 2 } as const;
/** CRI's ContainerState. */
export const CONTAINER_STATE = { created: 0, running: 1, exited: 2, unknown: 3 } as const;
/** CRI's PodSandboxState. */
export const SANDBOX_STATE = { ready: 0, notReady: 1 } as const;

export interface PodConfig {
  metadata: { name: string; uid: string; namespace: string; attempt?: number };
  hostname?: string;
  log_directory?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  linux?: {
    cgroup_parent?: string;
    security_context?: { namespace_options?: { network?: number; pid?: number; ipc?: number } };
  };
}

export interface ContainerConfig {
  metadata: { name: string; attempt?: number };
  image: { image: string };
  command?: string[];
  args?: string[];
  working_dir?: string;
  envs?: { key: string; value: string }[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  log_path?: string;
}

export interface ContainerStatus {
  id: string;
  state: number;
  started_at: number;
  finished_at: number;
  exit_code: number;
  reason: string;
  message: string;
  log_path: string;
}

/** How long one call may take: a cold boot under TCG on a busy host fits. */
const CALL_MS = 300_000;

export class CriClient {
  private readonly client: grpc.Client;

  /** A client of the CRI plugin of the containerd listening on unix socket `socket`. */
  constructor(socket: string) {
    this.client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  }

  close(): void {
    this.client.close();
  }

  private call<T>(
    service: 'RuntimeService' | 'ImageService',
    method: string,
    [reqType, resType]: [string, string],
    req: object,
  ): Promise<T> {
    const reqT = root.lookupType(M(reqType));
    const resT = root.lookupType(M(resType));
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        `/runtime.v1.${service}/${method}`,
        (v: object) => Buffer.from(reqT.encode(reqT.fromObject(v)).finish()),
        (b: Buffer) =>
          resT.toObject(resT.decode(b), { longs: Number, defaults: true, arrays: true }) as T,
        req,
        { deadline: Date.now() + CALL_MS },
        (err, res) => (err ? reject(err) : resolve(res as T)),
      );
    });
  }

  version() {
    return this.call<{ runtime_name: string; runtime_api_version: string }>(
      'RuntimeService',
      'Version',
      ['VersionRequest', 'VersionResponse'],
      { version: 'v1' },
    );
  }

  async runPodSandbox(config: PodConfig, runtimeHandler: string): Promise<string> {
    const r = await this.call<{ pod_sandbox_id: string }>(
      'RuntimeService',
      'RunPodSandbox',
      ['RunPodSandboxRequest', 'RunPodSandboxResponse'],
      { config, runtime_handler: runtimeHandler },
    );
    return r.pod_sandbox_id;
  }

  private podCall(method: string, id: string) {
    return this.call('RuntimeService', method, ['PodSandboxIdRequest', 'Empty'], {
      pod_sandbox_id: id,
    });
  }

  stopPodSandbox = (id: string) => this.podCall('StopPodSandbox', id);
  removePodSandbox = (id: string) => this.podCall('RemovePodSandbox', id);

  podSandboxStatus(id: string) {
    return this.call<{ status: { id: string; state: number; network: { ip: string } | null } }>(
      'RuntimeService',
      'PodSandboxStatus',
      ['PodSandboxIdRequest', 'PodSandboxStatusResponse'],
      { pod_sandbox_id: id },
    );
  }

  async listPodSandbox(): Promise<{ id: string; state: number }[]> {
    const r = await this.call<{ items: { id: string; state: number }[] }>(
      'RuntimeService',
      'ListPodSandbox',
      ['Empty', 'ListPodSandboxResponse'],
      {},
    );
    return r.items;
  }

  async createContainer(pod: string, config: ContainerConfig, podConfig: PodConfig) {
    const r = await this.call<{ container_id: string }>(
      'RuntimeService',
      'CreateContainer',
      ['CreateContainerRequest', 'CreateContainerResponse'],
      { pod_sandbox_id: pod, config, sandbox_config: podConfig },
    );
    return r.container_id;
  }

  private containerCall(method: string, id: string, timeoutS = 0) {
    return this.call('RuntimeService', method, ['ContainerIdRequest', 'Empty'], {
      container_id: id,
      timeout_or_verbose: timeoutS,
    });
  }

  startContainer = (id: string) => this.containerCall('StartContainer', id);
  /** StopContainer with a grace period of `timeoutS` seconds (0: kill at once). */
  stopContainer = (id: string, timeoutS = 0) => this.containerCall('StopContainer', id, timeoutS);
  removeContainer = (id: string) => this.containerCall('RemoveContainer', id);

  async containerStatus(id: string): Promise<ContainerStatus> {
    const r = await this.call<{ status: ContainerStatus }>(
      'RuntimeService',
      'ContainerStatus',
      ['ContainerIdRequest', 'ContainerStatusResponse'],
      { container_id: id },
    );
    return r.status;
  }

  async listContainers(): Promise<{ id: string; pod_sandbox_id: string; state: number }[]> {
    const r = await this.call<{
      containers: { id: string; pod_sandbox_id: string; state: number }[];
    }>('RuntimeService', 'ListContainers', ['Empty', 'ListContainersResponse'], {});
    return r.containers;
  }

  /** ExecSync: the command's output and exit code (`timeoutS` 0: no limit). */
  async execSync(id: string, cmd: string[], timeoutS = 0) {
    const r = await this.call<{ stdout: Buffer; stderr: Buffer; exit_code: number }>(
      'RuntimeService',
      'ExecSync',
      ['ExecSyncRequest', 'ExecSyncResponse'],
      { container_id: id, cmd, timeout: timeoutS },
    );
    return {
      stdout: r.stdout.toString('utf8'),
      stderr: r.stderr.toString('utf8'),
      code: r.exit_code,
    };
  }

  /** The image's id, or undefined when the node does not have it. */
  async imageId(ref: string): Promise<string | undefined> {
    const r = await this.call<{ image: { id: string } | null }>(
      'ImageService',
      'ImageStatus',
      ['ImageStatusRequest', 'ImageStatusResponse'],
      { image: { image: ref } },
    );
    return r.image?.id || undefined;
  }
}
