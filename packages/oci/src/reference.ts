import { quoteName } from '@offline-bundle/host';
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

const DOMAIN_RE =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?$|^\[[0-9a-fA-F:]+\](?::[0-9]+)?$/;
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
/** The distribution spec's bound on a tag. */
const MAX_TAG_CHARS = 128;
const TAG_RE = new RegExp(`^[\\w][\\w.-]{0,${MAX_TAG_CHARS - 1}}$`);
/** The distribution spec's bound on host[:port]/repository, the name a registry takes. */
const MAX_NAME_CHARS = 255;
/** A whole reference: scheme, name, :tag and @sha256:digest at their longest, with room to spare. */
const MAX_REFERENCE_CHARS = 512;

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
    throw new OciError(
      'INVALID_REFERENCE',
      `invalid reference ${quoteName(input)}: oci://HOST names no repository: give oci://HOST/REPO/NAME:VERSION`,
    );
  }
  return parseName(input, rest, true);
}

function parseName(input: string, rest: string, hostFirst: boolean): ImageReference {
  const fail = (why: string): never => {
    throw new OciError('INVALID_REFERENCE', `invalid image reference ${quoteName(input)}: ${why}`);
  };
  if (!rest) fail('empty');
  // before any splitting or resolving: a name no registry takes is refused as it is
  if (input.length > MAX_REFERENCE_CHARS)
    fail(
      `longer than the ${MAX_REFERENCE_CHARS} characters any reference a registry takes can be (a name of at most ${MAX_NAME_CHARS}, a tag of at most ${MAX_TAG_CHARS}): give the image's real name`,
    );
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
    if (!TAG_RE.test(tag))
      fail(
        `bad tag ${quoteName(tag)} (at most ${MAX_TAG_CHARS} letters, digits, '_', '.' and '-', not starting with '.' or '-')`,
      );
  }
  let registry = 'docker.io';
  let repository = rest;
  const slash = rest.indexOf('/');
  if (slash >= 0) {
    const first = rest.slice(0, slash);
    if (
      hostFirst ||
      first.includes('.') ||
      first.includes(':') ||
      first === 'localhost' ||
      first.startsWith('[')
    ) {
      registry = first;
      repository = rest.slice(slash + 1);
    }
  }
  if (!DOMAIN_RE.test(registry)) fail(`bad registry host ${quoteName(registry)}`);
  if (registry === 'index.docker.io') registry = 'docker.io';
  if (!hostFirst && registry === 'docker.io' && !repository.includes('/'))
    repository = `library/${repository}`;
  const name = `${registry}/${repository}`;
  if (name.length > MAX_NAME_CHARS)
    fail(
      `the name ${quoteName(name)} is more than the ${MAX_NAME_CHARS} characters a registry takes for host/repository: give the image's real name`,
    );
  for (const component of repository.split('/')) {
    if (!PATH_COMPONENT_RE.test(component))
      fail(
        `bad repository path component ${quoteName(component)} (lowercase letters, digits, separators)`,
      );
  }
  if (!tag && !digest) tag = 'latest';
  return {
    registry,
    repository,
    ...(tag !== undefined ? { tag } : {}),
    ...(digest !== undefined ? { digest } : {}),
  };
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
