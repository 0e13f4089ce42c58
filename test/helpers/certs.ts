/** Self-signed test certificates (RSA 2048, one day), made with the host's openssl. */
import { join } from 'node:path';
import { run } from '../../src/util/exec.js';

/**
 * A key and certificate for `cn` in `dir` (`<name>.key`, `<name>.crt`); `extra` goes to
 * `openssl req` (e.g. `-addext subjectAltName=IP:127.0.0.1`).
 */
export async function selfSignedCert(
  dir: string,
  cn: string,
  opts: { name?: string; extra?: string[] } = {},
): Promise<{ cert: string; key: string }> {
  const name = opts.name ?? 'tls';
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.crt`);
  await run('openssl', [
    ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${cn}`],
    ...(opts.extra ?? []),
    ...['-keyout', key, '-out', cert],
  ]);
  return { cert, key };
}
