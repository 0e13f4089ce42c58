/**
 * Task events to containerd, as its own shims send them: each event is wrapped in an
 * `Envelope{timestamp, namespace, topic, event: Any}` and forwarded over containerd's ttrpc
 * socket (`TTRPC_ADDRESS`) to `containerd.services.events.ttrpc.v1.Events/Forward`. Events
 * go out one at a time in the order they were published (containerd expects `/tasks/exit`
 * before `/tasks/delete`); a failed forward is logged, retried once on a new connection,
 * and never fails the task call that caused it.
 */
import { encode, timestamp } from './proto.js';
import { TtrpcClient } from './ttrpc.js';

/** Topic → the message type its event carries (package `containerd.events` upstream). */
const TOPICS = {
  '/tasks/create': 'TaskCreate',
  '/tasks/start': 'TaskStart',
  '/tasks/exit': 'TaskExit',
  '/tasks/delete': 'TaskDelete',
  '/tasks/exec-added': 'TaskExecAdded',
  '/tasks/exec-started': 'TaskExecStarted',
  '/tasks/paused': 'TaskPaused',
  '/tasks/resumed': 'TaskResumed',
  '/tasks/oom': 'TaskOOM',
} as const;

export type Topic = keyof typeof TOPICS;

const SERVICE = 'containerd.services.events.ttrpc.v1.Events';

/** Publishes events to one containerd, in order. */
export class Publisher {
  private client: Promise<TtrpcClient> | undefined;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    /** containerd's ttrpc socket; empty: events are dropped (a shim run by hand). */
    private readonly address: string,
    private readonly namespace: string,
    private readonly log: (msg: string) => void,
  ) {}

  /** Queue `event` under `topic`; resolves once it was forwarded (or given up on). */
  publish(topic: Topic, event: object): Promise<void> {
    const name = TOPICS[topic];
    const envelope = {
      timestamp: timestamp(Date.now()),
      namespace: this.namespace,
      topic,
      event: { type_url: `containerd.events.${name}`, value: encode(`events.${name}`, event) },
    };
    const payload = encode('events.ForwardRequest', { envelope });
    this.queue = this.queue.then(() => this.forward(topic, payload));
    return this.queue;
  }

  private async forward(topic: string, payload: Uint8Array): Promise<void> {
    if (!this.address) return;
    for (let attempt = 1; ; attempt++) {
      try {
        this.client ??= TtrpcClient.connect(this.address);
        const client = await this.client;
        await client.call(SERVICE, 'Forward', payload, {
          'containerd-namespace-ttrpc': this.namespace,
        });
        return;
      } catch (e) {
        this.client?.then((c) => c.close()).catch(() => undefined);
        this.client = undefined;
        if (attempt >= 2) {
          this.log(`event ${topic} not forwarded to containerd: ${(e as Error).message}`);
          return;
        }
      }
    }
  }

  close(): void {
    void this.client?.then((c) => c.close()).catch(() => undefined);
  }
}
