import { OciError } from './errors.js';
import { isDigest } from './digest.js';

/** A parsed registry image reference, normalized the way containers/image and docker do. */
export interface ImageReference {
  /** Registry host[:port], e.g. "quay.io"; "docker.io" for short names. */
  registry: string;
  /** Repository path inside the registry, e.g. "openshift-release-dev/ocp-release". */
  repository: string;
  tag?: string;
  digest?: string;
}

const DOMAIN_RE = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?$|^\[[0-9a-fA-F:]+\](?::[0-9]+)?$/;
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG_RE = /^[\w][\w.-]{0,127}$/;

export function parseReference(input: string): ImageReference {
  let rest = input.trim();
  if (rest.startsWith('docker://')) rest = rest.slice('docker://'.length);
  return parseName(input, rest, false);
}

/**
 * `oci://HOST/REPO[:TAG|@DIGEST]` as Helm and ORAS read it: the first component is the registry
 * host always (no docker.io short names: oci://registry/charts/demo is on host "registry").
 */
export function parseOciUrlReference(input: string): ImageReference {
  const rest = input.trim().replace(/^oci:\/\//, '');
  if (!rest.split('@')[0]!.includes('/')) {
    throw new OciError('INVALID_REFERENCE', `invalid reference "${input}": oci://HOST names no repository: give oci://HOST/REPO/NAME:VERSION`);
  }
  return parseName(input, rest, true);
}

function parseName(input: string, rest: string, hostFirst: boolean): ImageReference {
  const fail = (why: string): never => {
    throw new OciError('INVALID_REFERENCE', `invalid image reference "${input}": ${why}`);
  };
  if (!rest) fail('empty');
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!isDigest(digest)) fail('the digest must be sha256:<64 lowercase hex>');
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) fail(`bad tag "${tag}"`);
  }
  let registry = 'docker.io';
  let repository = rest;
  const slash = rest.indexOf('/');
  if (slash >= 0) {
    const first = rest.slice(0, slash);
    if (hostFirst || first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('[')) {
      registry = first;
      repository = rest.slice(slash + 1);
    }
  }
  if (!DOMAIN_RE.test(registry)) fail(`bad registry host "${registry}"`);
  if (registry === 'index.docker.io') registry = 'docker.io';
  if (!hostFirst && registry === 'docker.io' && !repository.includes('/')) repository = `library/${repository}`;
  for (const component of repository.split('/')) {
    if (!PATH_COMPONENT_RE.test(component)) fail(`bad repository path component "${component}" (lowercase letters, digits, separators)`);
  }
  if (!tag && !digest) tag = 'latest';
  return { registry, repository, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/** "registry/repository", the name a mirror rule or a pin matches. */
export function repositoryName(ref: ImageReference): string {
  return `${ref.registry}/${ref.repository}`;
}

export function formatReference(ref: ImageReference): string {
  let s = repositoryName(ref);
  if (ref.tag) s += `:${ref.tag}`;
  if (ref.digest) s += `@${ref.digest}`;
  return s;
}

/** "registry/repository@digest": how CRI-O and kubelet name an image once resolved. */
export function digestReference(ref: ImageReference, digest: string): string {
  return `${repositoryName(ref)}@${digest}`;
}
