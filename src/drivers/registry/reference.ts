/**
 * Image references (`REGISTRY/REPOSITORY[:TAG][@DIGEST]`), parsed as the distribution spec
 * and Docker read them. forkd names no registry of its own: a reference without a registry
 * host uses `FORKD_REGISTRY`, and otherwise is refused with a message saying how to name one.
 */
import { ForkdError } from '../../errors.js';

/** A parsed reference; `reference` is the tag or the digest the manifest is fetched by. */
export interface ImageRef {
  registry: string;
  repository: string;
  tag?: string;
  digest?: string;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
export const DIGEST = /^sha256:[a-f0-9]{64}$/;

/** Parse `ref`; `defaultRegistry` stands in when the first component is no host. */
export function parseReference(
  ref: string,
  defaultRegistry = process.env.FORKD_REGISTRY,
): ImageRef {
  let rest = ref.trim();
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw badRef(ref, `${digest} is not a sha256 digest`);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw badRef(ref, `${JSON.stringify(tag)} is not a valid tag`);
  }
  const parts = rest.split('/');
  let registry: string;
  if (parts.length > 1 && /[.:]|^localhost$/.test(parts[0]!)) {
    registry = parts.shift()!;
  } else if (defaultRegistry) {
    registry = defaultRegistry;
    // Docker's convention for official images on its default registry.
    if (parts.length === 1) parts.unshift('library');
  } else {
    throw badRef(
      ref,
      'it names no registry: write REGISTRY/REPOSITORY[:TAG] (e.g. 127.0.0.1:5000/app:1), ' +
        'or set FORKD_REGISTRY to the registry to use for short names',
    );
  }
  if (!parts.every((c) => COMPONENT.test(c))) {
    throw badRef(ref, 'repository components are lowercase letters, digits and . _ -');
  }
  if (!digest && !tag) tag = 'latest';
  return { registry, repository: parts.join('/'), tag, digest };
}

/** The canonical text of a reference (with its digest when known). */
export function formatReference(r: ImageRef): string {
  return `${r.registry}/${r.repository}${r.tag ? `:${r.tag}` : ''}${r.digest ? `@${r.digest}` : ''}`;
}

/** What a manifest is fetched by: the digest when given (it pins), else the tag. */
export function manifestRef(r: ImageRef): string {
  return r.digest ?? r.tag ?? 'latest';
}

function badRef(ref: string, why: string): ForkdError {
  return new ForkdError('bad_request', `invalid image reference ${JSON.stringify(ref)}: ${why}`, {
    reference: ref,
  });
}
