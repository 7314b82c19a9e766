import { parseReference, repositoryName } from '@offline-bundle/oci';
import { RuntimeError } from './errors.js';

const HOST_PORT_RE =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?$|^\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?$/;

/** A registry address "host[:port]" (the mirror, or a source registry host). */
export function assertHost(host: string, what: string): void {
  if (typeof host !== 'string' || !HOST_PORT_RE.test(host)) {
    throw new RuntimeError(
      'INVALID_SPEC',
      `invalid ${what} ${JSON.stringify(host)}: expected host[:port]`,
    );
  }
}

/**
 * A fully qualified repository name "registry/path" without tag or digest, spelled exactly
 * as containers/image and containerd spell it (no implicit docker.io/library/ expansion).
 */
export function assertRepository(repository: string): void {
  let ok: boolean;
  try {
    const ref = parseReference(repository);
    ok =
      repository.includes('/') &&
      repositoryName(ref) === repository &&
      repository.startsWith(`${ref.registry}/`);
  } catch {
    ok = false;
  }
  if (!ok) {
    throw new RuntimeError(
      'INVALID_SPEC',
      `invalid repository ${JSON.stringify(repository)}: expected registry/path without tag or digest, e.g. quay.io/ns/app`,
    );
  }
}

/** An image reference as passed to a runtime: non-empty, one line, no whitespace. */
export function assertImageRef(ref: string): void {
  if (typeof ref !== 'string' || !ref || /[\s\0"\\]/.test(ref)) {
    throw new RuntimeError('INVALID_SPEC', `invalid image reference ${JSON.stringify(ref)}`);
  }
}
