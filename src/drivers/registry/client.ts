/**
 * A registry v2 (OCI distribution) client: manifests and blobs, get and put, every byte
 * checked against its digest as it streams. It answers the auth challenges itself
 * (auth.ts) and speaks HTTPS, or plain HTTP to loopback registries and those listed in
 * `FORKD_INSECURE_REGISTRIES` when HTTPS does not connect. Image pulls use it, and so can
 * snapshot pushes (a snapshot is an OCI artifact): it knows nothing of images.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, rename, rm, stat } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ForkdError } from '../../errors.js';
import {
  basicHeader,
  fetchToken,
  parseChallenge,
  unauthorized,
  type CredentialSource,
  type Credentials,
} from './auth.js';
import { MANIFEST_TYPES } from './media.js';
import { fileSink } from '../../util/file-sink.js';

export interface RegistryOptions {
  credentials?: CredentialSource;
  /** Aborts every request (the caller went away). */
  signal?: AbortSignal;
}

/** A manifest as fetched: its bytes, the media type it declares, its digest. */
export interface FetchedManifest {
  mediaType: string;
  digest: string;
  bytes: Buffer;
}

type Access = 'pull' | 'pull,push';

interface Req {
  method: string;
  path: string;
  repo?: string;
  access?: Access;
  headers?: Record<string, string>;
  body?: Buffer | Readable;
  size?: number;
}

const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/;

/** Bytes of a manifest or config forkd reads into memory at most. */
const JSON_MAX = 4 * 1024 * 1024;

export function sha256(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

export class RegistryClient {
  private base: string | undefined;
  private readonly tokens = new Map<string, string>();
  private creds: Credentials | undefined | null = null;
  private basic = false;

  constructor(
    readonly registry: string,
    private readonly opts: RegistryOptions = {},
  ) {}

  /** Check that the registry answers and takes our credentials (for `forkd login`). */
  async ping(): Promise<void> {
    const res = await this.request({ method: 'GET', path: '/v2/' });
    await res.body?.cancel();
    if (!res.ok) throw this.failure(res, 'the registry');
  }

  /** GET a manifest by tag or digest; a digest reference is verified. */
  async getManifest(repo: string, ref: string): Promise<FetchedManifest> {
    const res = await this.request({
      method: 'GET',
      path: `/v2/${repo}/manifests/${ref}`,
      repo,
      headers: { accept: MANIFEST_TYPES.join(', ') },
    });
    if (!res.ok) throw this.failure(res, `${repo}:${ref}`);
    const bytes = await readLimited(res, JSON_MAX);
    const digest = sha256(bytes);
    if (ref.startsWith('sha256:') && ref !== digest) throw mismatch(`manifest ${ref}`, digest);
    const mediaType =
      (JSON.parse(bytes.toString('utf8')) as { mediaType?: string }).mediaType ??
      res.headers.get('content-type')?.split(';')[0] ??
      '';
    return { mediaType, digest, bytes };
  }

  /** PUT a manifest under a tag (or its digest); answers its digest. */
  async putManifest(repo: string, ref: string, mediaType: string, bytes: Buffer): Promise<string> {
    const res = await this.request({
      method: 'PUT',
      path: `/v2/${repo}/manifests/${ref}`,
      repo,
      access: 'pull,push',
      headers: { 'content-type': mediaType },
      body: bytes,
    });
    await res.body?.cancel();
    if (!res.ok) throw this.failure(res, `${repo}:${ref}`);
    return sha256(bytes);
  }

  /** GET a small blob (a config) into memory, verified. */
  async getBlobBytes(repo: string, digest: string, size?: number): Promise<Buffer> {
    const res = await this.blobResponse(repo, digest);
    const bytes = await readLimited(res, Math.min(size ?? JSON_MAX, JSON_MAX));
    if (sha256(bytes) !== digest) throw mismatch(`blob ${digest}`, sha256(bytes));
    return bytes;
  }

  /**
   * Stream a blob into `dest`, checking size and digest on the way; `onBytes` sees each
   * chunk's length. On any failure `dest` is removed: a caller never finds a partial blob.
   */
  async getBlob(
    repo: string,
    digest: string,
    dest: string,
    opts: { size?: number; onBytes?: (n: number) => void } = {},
  ): Promise<void> {
    const res = await this.blobResponse(repo, digest);
    try {
      // Opened before the body is wrapped: a body that errors while we wait for the open
      // would have no listener yet.
      const sink = await fileSink(dest, 'wx');
      await pipeline(
        Readable.fromWeb(res.body as never),
        verifier(digest, opts.size, opts.onBytes),
        sink,
      );
    } catch (e) {
      await rm(dest, { force: true });
      if (e instanceof ForkdError) throw e;
      throw new ForkdError(
        'blob_invalid',
        `blob ${digest} broke off while downloading: pull again`,
        {
          digest,
          cause: String(e),
        },
      );
    }
  }

  /** Whether the repository has the blob already (a push then skips it). */
  async hasBlob(repo: string, digest: string): Promise<boolean> {
    const res = await this.request({ method: 'HEAD', path: `/v2/${repo}/blobs/${digest}`, repo });
    await res.body?.cancel();
    if (res.status === 404) return false;
    if (!res.ok) throw this.failure(res, `blob ${digest}`);
    return true;
  }

  /** Upload a blob from a file (POST a session, then one PUT with the digest). */
  async putBlob(repo: string, digest: string, file: string, size: number): Promise<void> {
    if (await this.hasBlob(repo, digest)) return;
    const start = await this.request({
      method: 'POST',
      path: `/v2/${repo}/blobs/uploads/`,
      repo,
      access: 'pull,push',
    });
    await start.body?.cancel();
    const location = start.headers.get('location');
    if (start.status !== 202 || !location) throw this.failure(start, `upload to ${repo}`);
    const url = new URL(location, await this.baseUrl());
    url.searchParams.set('digest', digest);
    const res = await this.request({
      method: 'PUT',
      path: url.pathname + url.search,
      repo,
      access: 'pull,push',
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) },
      body: createReadStream(file),
      size,
    });
    await res.body?.cancel();
    if (res.status !== 201) throw this.failure(res, `blob ${digest}`);
  }

  /**
   * Upload a blob unless the repository has it: cross-mounted from one of `mountFrom` (other
   * repositories of this registry known to hold it) when the registry allows, else sent in
   * `chunkBytes` PATCHes (the chunked protocol) and closed with a PUT naming the digest.
   */
  async pushBlob(
    repo: string,
    digest: string,
    file: string | Buffer,
    size: number,
    opts: { mountFrom?: string[]; chunkBytes?: number; onBytes?: (n: number) => void } = {},
  ): Promise<'exists' | 'mounted' | 'uploaded'> {
    if (await this.hasBlob(repo, digest)) return 'exists';
    let location: string | null = null;
    for (const from of opts.mountFrom ?? []) {
      if (from === repo) continue;
      const q = `mount=${encodeURIComponent(digest)}&from=${encodeURIComponent(from)}`;
      const res = await this.uploadRequest('POST', repo, `/v2/${repo}/blobs/uploads/?${q}`);
      if (res.status === 201) return 'mounted';
      location = res.headers.get('location'); // 202: the registry opened an upload instead
      if (res.status !== 202 || !location) throw this.failure(res, `upload to ${repo}`);
      break;
    }
    if (!location) {
      const start = await this.uploadRequest('POST', repo, `/v2/${repo}/blobs/uploads/`);
      location = start.headers.get('location');
      if (start.status !== 202 || !location) throw this.failure(start, `upload to ${repo}`);
    }
    const chunk = opts.chunkBytes ?? 16 << 20;
    // A small blob made in memory (a snapshot chunk) is sent from its buffer.
    const fh = typeof file === 'string' ? await open(file, 'r') : undefined;
    try {
      for (let at = 0; at < size; at += chunk) {
        const n = Math.min(chunk, size - at);
        const buf = fh ? Buffer.alloc(n) : (file as Buffer).subarray(at, at + n);
        if (fh) await fh.read(buf, 0, n, at);
        const res = await this.uploadRequest('PATCH', repo, await this.uploadPath(location), buf, {
          'content-type': 'application/octet-stream',
          'content-range': `${at}-${at + buf.length - 1}`,
        });
        location = res.headers.get('location');
        if (res.status !== 202 || !location) throw this.failure(res, `blob ${digest}`);
        opts.onBytes?.(buf.length);
      }
    } finally {
      await fh?.close();
    }
    const url = new URL(await this.uploadPath(location), await this.baseUrl());
    url.searchParams.set('digest', digest);
    const done = await this.uploadRequest('PUT', repo, url.pathname + url.search, Buffer.alloc(0));
    if (done.status !== 201) throw this.failure(done, `blob ${digest}`);
    return 'uploaded';
  }

  /**
   * Stream a blob into `dest` through `dest.partial`, which a broken-off download leaves
   * behind: the next call hashes what it holds and asks only for the rest (a Range
   * request; a registry that answers the whole blob instead starts it over). The digest
   * is checked over the whole file; a wrong one removes the partial file too.
   */
  async getBlobResumable(
    repo: string,
    digest: string,
    dest: string,
    opts: { size?: number; onBytes?: (n: number) => void } = {},
  ): Promise<{ resumedBytes: number }> {
    const partial = `${dest}.partial`;
    const have = await stat(partial).then(
      (s) => s.size,
      () => 0,
    );
    const hash = createHash('sha256');
    if (have > 0) for await (const c of createReadStream(partial)) hash.update(c as Buffer);
    // A partial holding the whole blob (a pull killed between its last byte and the rename)
    // or more has no range left to ask for: a registry answers 416 to every retry.
    if (have > 0 && opts.size !== undefined && have >= opts.size) {
      if (have === opts.size && `sha256:${hash.digest('hex')}` === digest) {
        await rename(partial, dest);
        return { resumedBytes: have };
      }
      await rm(partial, { force: true });
      return this.getBlobResumable(repo, digest, dest, opts);
    }
    const headers: Record<string, string> = have > 0 ? { range: `bytes=${have}-` } : {};
    const res = await this.request({
      method: 'GET',
      path: `/v2/${repo}/blobs/${digest}`,
      repo,
      headers,
    });
    if (res.status === 416 && have > 0) {
      await res.body?.cancel();
      await rm(partial, { force: true }); // not a prefix of this blob: start over
      return this.getBlobResumable(repo, digest, dest, opts);
    }
    if (!res.ok) throw this.failure(res, `blob ${digest} of ${repo}`);
    const resumed = res.status === 206 ? have : 0;
    const fresh = resumed === 0 ? createHash('sha256') : hash;
    let seen = resumed;
    const count = new Transform({
      transform(c: Buffer, _e, cb) {
        seen += c.length;
        fresh.update(c);
        opts.onBytes?.(c.length);
        cb(null, c);
      },
    });
    try {
      // Opened before the body is wrapped: a body that errors while we wait for the open
      // would have no listener yet.
      const sink = await fileSink(partial, resumed > 0 ? 'a' : 'w');
      await pipeline(Readable.fromWeb(res.body as never), count, sink);
    } catch (e) {
      this.opts.signal?.throwIfAborted();
      throw new ForkdError(
        'blob_invalid',
        `blob ${digest} broke off at ${seen} bytes: pull again to resume`,
        {
          digest,
          cause: String(e),
        },
      );
    }
    const got = `sha256:${fresh.digest('hex')}`;
    if (got !== digest || (opts.size !== undefined && seen !== opts.size)) {
      await rm(partial, { force: true });
      throw mismatch(`blob ${digest}`, got);
    }
    await rename(partial, dest);
    return { resumedBytes: resumed };
  }

  private async uploadPath(location: string): Promise<string> {
    const url = new URL(location, await this.baseUrl());
    return url.pathname + url.search;
  }

  private async uploadRequest(
    method: string,
    repo: string,
    path: string,
    body?: Buffer,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    const res = await this.request({ method, path, repo, access: 'pull,push', headers, body });
    await res.body?.cancel();
    return res;
  }

  private async blobResponse(repo: string, digest: string): Promise<Response> {
    const res = await this.request({ method: 'GET', path: `/v2/${repo}/blobs/${digest}`, repo });
    if (!res.ok) throw this.failure(res, `blob ${digest} of ${repo}`);
    if (!res.body)
      throw new ForkdError('registry_unreachable', `blob ${digest} came without a body`);
    return res;
  }

  /** One request, answering a 401 challenge once (Basic or Bearer) and retrying. */
  private async request(req: Req): Promise<Response> {
    const scope = req.repo ? `repository:${req.repo}:${req.access ?? 'pull'}` : '';
    const first = await this.send(req, this.authHeader(scope));
    if (first.status !== 401) return first;
    await first.body?.cancel();
    const challenge = parseChallenge(first.headers.get('www-authenticate') ?? '');
    const creds = await this.credentials();
    if (challenge?.scheme === 'bearer') {
      const token = await fetchToken(
        challenge,
        challenge.params.scope ?? scope,
        creds,
        this.opts.signal,
      );
      this.tokens.set(scope, token);
    } else if (challenge?.scheme === 'basic') {
      if (!creds)
        throw unauthorized(
          `${this.registry} wants credentials: run \`forkd login ${this.registry}\``,
          { registry: this.registry },
        );
      this.basic = true;
    } else {
      throw unauthorized(`${this.registry} answered 401 without a challenge forkd knows`);
    }
    if (req.body instanceof Readable) throw unauthorized('the upload was refused before it began');
    const second = await this.send(req, this.authHeader(scope));
    if (second.status === 401) {
      await second.body?.cancel();
      throw unauthorized(
        creds
          ? `${this.registry} refused the credentials: run \`forkd login ${this.registry}\` again`
          : `${this.registry} wants credentials: run \`forkd login ${this.registry}\``,
        { registry: this.registry },
      );
    }
    return second;
  }

  private authHeader(scope: string): string | undefined {
    const token = this.tokens.get(scope);
    if (token) return `Bearer ${token}`;
    if (this.basic && this.creds) return basicHeader(this.creds);
    return undefined;
  }

  private async credentials(): Promise<Credentials | undefined> {
    if (this.creds === null) this.creds = await this.opts.credentials?.(this.registry);
    return this.creds;
  }

  private async send(req: Req, authorization: string | undefined): Promise<Response> {
    const headers: Record<string, string> = { ...req.headers };
    if (authorization) headers.authorization = authorization;
    const base = await this.baseUrl();
    try {
      return await fetch(new URL(req.path, base), {
        method: req.method,
        headers,
        body: req.body instanceof Readable ? (Readable.toWeb(req.body) as never) : req.body,
        signal: this.opts.signal,
        ...(req.body instanceof Readable ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (e) {
      this.opts.signal?.throwIfAborted();
      throw unreachable(this.registry, e);
    }
  }

  /** https://, or http:// for a loopback or listed registry whose HTTPS does not connect. */
  private async baseUrl(): Promise<string> {
    if (this.base) return this.base;
    const https = `https://${this.registry}`;
    if (!insecureAllowed(this.registry)) return (this.base = https);
    try {
      const res = await fetch(`${https}/v2/`, { signal: this.opts.signal });
      await res.body?.cancel();
      this.base = https;
    } catch {
      this.opts.signal?.throwIfAborted();
      this.base = `http://${this.registry}`;
    }
    return this.base;
  }

  private failure(res: Response, what: string): ForkdError {
    void res.body?.cancel().catch(() => undefined);
    const details = { registry: this.registry, status: res.status };
    if (res.status === 404) {
      return new ForkdError(
        'reference_not_found',
        `${this.registry} has no ${what}: check the repository and tag`,
        details,
      );
    }
    if (res.status === 401 || res.status === 403) {
      return unauthorized(
        `${this.registry} does not let these credentials reach ${what}: run \`forkd login ${this.registry}\``,
        details,
      );
    }
    return new ForkdError(
      'registry_unreachable',
      `${this.registry} answered ${res.status} for ${what}${res.status === 429 ? ' (rate limited: retry later)' : ''}`,
      details,
    );
  }
}

function insecureAllowed(registry: string): boolean {
  if (LOOPBACK.test(registry)) return true;
  const listed = (process.env.FORKD_INSECURE_REGISTRIES ?? '').split(',').map((s) => s.trim());
  return listed.includes(registry);
}

function unreachable(registry: string, e: unknown): ForkdError {
  const cause = (e as Error).cause ?? e;
  return new ForkdError(
    'registry_unreachable',
    `cannot reach the registry ${registry}: ${String((cause as Error).message ?? cause)}`,
    { registry },
  );
}

function mismatch(what: string, got: string): ForkdError {
  return new ForkdError(
    'blob_invalid',
    `${what} does not match its digest (got ${got}): the registry or archive is corrupt; nothing was kept`,
    { got },
  );
}

/** A pass-through that hashes and counts, failing on a wrong digest or size at the end. */
export function verifier(digest: string, size?: number, onBytes?: (n: number) => void): Transform {
  const hash = createHash('sha256');
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      if (size !== undefined && seen > size) {
        cb(
          new ForkdError(
            'blob_invalid',
            `blob ${digest} is longer than its ${size} bytes: nothing was kept`,
            { digest, size },
          ),
        );
        return;
      }
      hash.update(chunk);
      onBytes?.(chunk.length);
      cb(null, chunk);
    },
    flush(cb) {
      if (size !== undefined && seen !== size) {
        cb(
          new ForkdError(
            'blob_invalid',
            `blob ${digest} is truncated: ${seen} of ${size} bytes; nothing was kept`,
            { digest, size, got: seen },
          ),
        );
        return;
      }
      const got = `sha256:${hash.digest('hex')}`;
      cb(got === digest ? null : mismatch(`blob ${digest}`, got));
    },
  });
}

async function readLimited(res: Response, max: number): Promise<Buffer> {
  const bytes = Buffer.from(await res.arrayBuffer());
  if (bytes.length > max) {
    throw new ForkdError(
      'image_format_unsupported',
      `a manifest or config of ${bytes.length} bytes is larger than forkd reads (${max})`,
    );
  }
  return bytes;
}
