/**
 * `sandbox.files`: the sandbox's filesystem. Contents travel as raw octet streams both
 * ways, so a large upload from a Readable and a `readStream` download are never held in
 * memory whole.
 */
import { Readable } from 'node:stream';
import type { CallOptions } from './client.js';
import type { Transport } from './http.js';
import type { EntryInfo } from './types.js';
import { fromWire, FILE_STAT } from './wire.js';

/**
 * How to write a file.
 *
 * @example
 * await sandbox.files.write('/app/run.sh', script, { mode: 0o755, parents: true });
 */
export interface WriteOptions extends CallOptions {
  /** Permission bits for a new file, like 0o644. */
  mode?: number;
  /** Create missing parent directories. */
  parents?: boolean;
}

/**
 * What a write stored.
 *
 * @example
 * const { size } = await sandbox.files.write('/tmp/a', 'abc'); // size === 3
 */
export interface WriteInfo {
  path: string;
  /** Bytes written. */
  size: number;
}

/**
 * The files of one sandbox (`sandbox.files`).
 *
 * @example
 * await sandbox.files.write('/tmp/hello.txt', 'hello');
 * const text = Buffer.from(await sandbox.files.read('/tmp/hello.txt')).toString();
 */
export class Files {
  constructor(
    private readonly transport: Transport,
    /** `/v1/sandboxes/ID`. */
    private readonly base: string,
  ) {}

  /**
   * Write a file, replacing it if it exists. A Readable is streamed as it is read.
   *
   * @example
   * await sandbox.files.write('/data/big.bin', fs.createReadStream('big.bin'));
   */
  async write(
    path: string,
    data: string | Uint8Array | Readable,
    opts: WriteOptions = {},
  ): Promise<WriteInfo> {
    const { size } = await this.transport.json<{ size: number }>({
      method: 'PUT',
      path: `${this.base}/files`,
      query: { path, mode: opts.mode, parents: opts.parents },
      body: typeof data === 'string' ? Buffer.from(data, 'utf8') : data,
      signal: opts.signal,
    });
    return { path, size };
  }

  /**
   * A file's contents. For large files prefer {@link Files.readStream}.
   *
   * @example
   * const bytes = await sandbox.files.read('/etc/os-release');
   */
  async read(path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    return this.transport.bytes({
      method: 'GET',
      path: `${this.base}/files`,
      query: { path },
      signal: opts.signal,
    });
  }

  /**
   * A file's contents as a stream (resolves once the daemon has found the file).
   *
   * @example
   * await pipeline(await sandbox.files.readStream('/data/big.bin'), fs.createWriteStream('big.bin'));
   */
  async readStream(path: string, opts: CallOptions = {}): Promise<Readable> {
    const res = await this.transport.send({
      method: 'GET',
      path: `${this.base}/files`,
      query: { path },
      signal: opts.signal,
    });
    return Readable.from(this.transport.body(res, opts.signal), { objectMode: false });
  }

  /**
   * The entries of a directory.
   *
   * @example
   * for (const e of await sandbox.files.list('/etc')) console.log(e.kind, e.name);
   */
  async list(path: string, opts: CallOptions = {}): Promise<EntryInfo[]> {
    const wire = await this.transport.json<{ entries: unknown[] }>({
      method: 'GET',
      path: `${this.base}/files/list`,
      query: { path },
      signal: opts.signal,
    });
    return wire.entries.map((e) => fromWire(FILE_STAT, e));
  }

  /**
   * One entry's kind, size, mode and mtime; GuestFileNotFoundError when it does not exist.
   *
   * @example
   * const exists = await sandbox.files.stat('/tmp/x').then(() => true, () => false);
   */
  async stat(path: string, opts: CallOptions = {}): Promise<EntryInfo> {
    const wire = await this.transport.json({
      method: 'GET',
      path: `${this.base}/files/stat`,
      query: { path },
      signal: opts.signal,
    });
    return fromWire(FILE_STAT, wire);
  }

  /**
   * Remove a file, or a directory with `recursive`.
   *
   * @example
   * await sandbox.files.remove('/tmp/build', { recursive: true });
   */
  async remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.transport.bytes({
      method: 'DELETE',
      path: `${this.base}/files`,
      query: { path, recursive: opts.recursive },
      signal: opts.signal,
    });
  }

  /**
   * Create a directory (with its parents, unless `parents: false`).
   *
   * @example
   * await sandbox.files.makeDir('/work/out');
   */
  async makeDir(
    path: string,
    opts: CallOptions & { parents?: boolean; mode?: number } = {},
  ): Promise<void> {
    await this.transport.bytes({
      method: 'POST',
      path: `${this.base}/files/mkdir`,
      json: { path, parents: opts.parents ?? true, mode: opts.mode },
      signal: opts.signal,
    });
  }
}
