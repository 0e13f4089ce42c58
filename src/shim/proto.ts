/**
 * The protobuf messages the shim speaks, written here rather than vendored from upstream
 * `.proto` files (issue 30): ttrpc's request and response envelope, containerd's task
 * service v2 (`containerd.task.v2.Task`), its task events and the events service's
 * `Forward`, and the two gRPC calls that tell which image snapshot a task's root is
 * (containers' Get, snapshots' Stat; fields the shim reads only). Field numbers follow containerd 1.6's protos; names stay snake_case, as on the
 * wire's JSON twin, so a decoded message reads like the proto it came from.
 */
import protobuf from 'protobufjs';

type Fields = Record<string, { type: string; id: number; rule?: 'repeated'; keyType?: string }>;

/**
 * `{name: type}` in field-number order (ids 1, 2, …) unless a number is given; `T[]` is a
 * repeated field, `map` a `map<string, string>`. Exported for the tests' CRI client.
 */
export function msg(...fields: [string, string, number?][]): { fields: Fields } {
  const out: Fields = {};
  fields.forEach(([name, type, id], i) => {
    const n = id ?? i + 1;
    if (type === 'map') {
      out[name] = { type: 'string', keyType: 'string', id: n };
      return;
    }
    const repeated = type.endsWith('[]');
    out[name] = {
      type: repeated ? type.slice(0, -2) : type,
      id: n,
      ...(repeated ? { rule: 'repeated' as const } : {}),
    };
  });
  return { fields: out };
}

const TS = 'google.protobuf.Timestamp';

const root = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Any: msg(['type_url', 'string'], ['value', 'bytes']),
            Timestamp: msg(['seconds', 'int64'], ['nanos', 'int32']),
            Empty: msg(),
          },
        },
        rpc: { nested: { Status: msg(['code', 'int32'], ['message', 'string']) } },
      },
    },
    ttrpc: {
      nested: {
        KeyValue: msg(['key', 'string'], ['value', 'string']),
        Request: msg(
          ['service', 'string'],
          ['method', 'string'],
          ['payload', 'bytes'],
          ['timeout_nano', 'int64'],
          ['metadata', 'ttrpc.KeyValue[]'],
        ),
        Response: msg(['status', 'google.rpc.Status'], ['payload', 'bytes']),
      },
    },
    task: {
      nested: {
        Mount: msg(
          ['type', 'string'],
          ['source', 'string'],
          ['target', 'string'],
          ['options', 'string[]'],
        ),
        CreateTaskRequest: msg(
          ['id', 'string'],
          ['bundle', 'string'],
          ['rootfs', 'task.Mount[]'],
          ['terminal', 'bool'],
          ['stdin', 'string'],
          ['stdout', 'string'],
          ['stderr', 'string'],
          ['checkpoint', 'string'],
          ['parent_checkpoint', 'string'],
          ['options', 'google.protobuf.Any'],
        ),
        CreateTaskResponse: msg(['pid', 'uint32']),
        IdRequest: msg(['id', 'string'], ['exec_id', 'string']),
        PidResponse: msg(['pid', 'uint32']),
        DeleteResponse: msg(['pid', 'uint32'], ['exit_status', 'uint32'], ['exited_at', TS]),
        ExecProcessRequest: msg(
          ['id', 'string'],
          ['exec_id', 'string'],
          ['terminal', 'bool'],
          ['stdin', 'string'],
          ['stdout', 'string'],
          ['stderr', 'string'],
          ['spec', 'google.protobuf.Any'],
        ),
        ResizePtyRequest: msg(
          ['id', 'string'],
          ['exec_id', 'string'],
          ['width', 'uint32'],
          ['height', 'uint32'],
        ),
        StateResponse: msg(
          ['id', 'string'],
          ['bundle', 'string'],
          ['pid', 'uint32'],
          ['status', 'uint32'],
          ['stdin', 'string'],
          ['stdout', 'string'],
          ['stderr', 'string'],
          ['terminal', 'bool'],
          ['exit_status', 'uint32'],
          ['exited_at', TS],
          ['exec_id', 'string'],
        ),
        KillRequest: msg(
          ['id', 'string'],
          ['exec_id', 'string'],
          ['signal', 'uint32'],
          ['all', 'bool'],
        ),
        CloseIORequest: msg(['id', 'string'], ['exec_id', 'string'], ['stdin', 'bool']),
        ProcessInfo: msg(['pid', 'uint32'], ['info', 'google.protobuf.Any']),
        PidsResponse: msg(['processes', 'task.ProcessInfo[]']),
        WaitResponse: msg(['exit_status', 'uint32'], ['exited_at', TS]),
        StatsResponse: msg(['stats', 'google.protobuf.Any']),
        ConnectResponse: msg(['shim_pid', 'uint32'], ['task_pid', 'uint32'], ['version', 'string']),
        ShutdownRequest: msg(['id', 'string'], ['now', 'bool']),
      },
    },
    containers: {
      nested: {
        GetContainerRequest: msg(['id', 'string']),
        Container: msg(
          ['image', 'string', 3],
          ['snapshotter', 'string', 6],
          ['snapshot_key', 'string', 7],
        ),
        GetContainerResponse: msg(['container', 'containers.Container']),
      },
    },
    snapshots: {
      nested: {
        StatSnapshotRequest: msg(['snapshotter', 'string'], ['key', 'string']),
        Info: msg(['name', 'string'], ['parent', 'string']),
        StatSnapshotResponse: msg(['info', 'snapshots.Info']),
      },
    },
    /** `io.containerd.cgroups.v1`'s Metrics, the fields forkd measures. */
    cgroups: {
      nested: {
        CPUUsage: msg(['total', 'uint64']),
        CPUStat: msg(['usage', 'cgroups.CPUUsage']),
        MemoryEntry: msg(['limit', 'uint64'], ['usage', 'uint64']),
        MemoryStat: msg(['usage', 'cgroups.MemoryEntry', 33]),
        MemoryOomControl: msg(['oom_kill', 'uint64', 3]),
        Metrics: msg(
          ['cpu', 'cgroups.CPUStat', 3],
          ['memory', 'cgroups.MemoryStat', 4],
          ['memory_oom_control', 'cgroups.MemoryOomControl', 9],
        ),
      },
    },
    events: {
      nested: {
        TaskIO: msg(
          ['stdin', 'string'],
          ['stdout', 'string'],
          ['stderr', 'string'],
          ['terminal', 'bool'],
        ),
        TaskCreate: msg(
          ['container_id', 'string'],
          ['bundle', 'string'],
          ['rootfs', 'task.Mount[]'],
          ['io', 'events.TaskIO'],
          ['checkpoint', 'string'],
          ['pid', 'uint32'],
        ),
        TaskStart: msg(['container_id', 'string'], ['pid', 'uint32']),
        TaskDelete: msg(
          ['container_id', 'string'],
          ['pid', 'uint32'],
          ['exit_status', 'uint32'],
          ['exited_at', TS],
          ['id', 'string'],
        ),
        TaskExit: msg(
          ['container_id', 'string'],
          ['id', 'string'],
          ['pid', 'uint32'],
          ['exit_status', 'uint32'],
          ['exited_at', TS],
        ),
        TaskExecAdded: msg(['container_id', 'string'], ['exec_id', 'string']),
        TaskExecStarted: msg(['container_id', 'string'], ['exec_id', 'string'], ['pid', 'uint32']),
        TaskPaused: msg(['container_id', 'string']),
        TaskResumed: msg(['container_id', 'string']),
        Envelope: msg(
          ['timestamp', TS],
          ['namespace', 'string'],
          ['topic', 'string'],
          ['event', 'google.protobuf.Any'],
        ),
        TaskOOM: msg(['container_id', 'string']),
        ForwardRequest: msg(['envelope', 'events.Envelope']),
      },
    },
  },
});

/** A message type by its name in the table above (`task.KillRequest`). */
export function type(name: string): protobuf.Type {
  return root.lookupType(name);
}

/** Encode `value` as message `name` (unknown fields are not an error: they are dropped). */
export function encode(name: string, value: object): Uint8Array {
  const t = type(name);
  return t.encode(t.fromObject(value)).finish();
}

/**
 * Decode bytes as message `name` into a plain object: 64-bit integers as numbers, bytes as
 * Buffers, every scalar present (defaults filled in, as proto3 readers see them).
 */
export function decode<T>(name: string, bytes: Uint8Array): T {
  const t = type(name);
  return t.toObject(t.decode(bytes), { longs: Number, defaults: true, arrays: true }) as T;
}

/** `google.protobuf.Timestamp` of a time in ms since the epoch. */
export function timestamp(ms: number): { seconds: number; nanos: number } {
  return { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 };
}
