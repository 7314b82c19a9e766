// --agent-image: a bundle-agent image carried for the node agent's self-upgrade, under the
// fixed name the agent looks for (AGENT_REPOSITORY:VERSION) and named in bundle.json.
import { readFile } from 'node:fs/promises';
import { OciError } from '@offline-bundle/oci';
import { parseSourceSpec, type BlobCache, type ImageSource } from '@offline-bundle/image-fetch';
import {
  AGENT_REPOSITORY,
  AGENT_VERSION_RULE,
  isAgentVersion,
  type BundleAgent,
  type BundleImage,
} from '@offline-bundle/format';

/** The label scripts/oci-image.mjs sets (the OCI standard one). */
const VERSION_LABEL = 'org.opencontainers.image.version';
/** An image config larger than this is not an image config. */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;
const CONFIG_MEDIA_TYPES = [
  'application/vnd.oci.image.config.v1+json',
  'application/vnd.docker.container.image.v1+json',
];

/** Refuses `=NAME` before anything is fetched: the agent image's name is not the factory's choice. */
export function checkAgentImageSpec(spec: string): void {
  if (parseSourceSpec(spec).name)
    throw new OciError(
      'INVALID_REFERENCE',
      `--agent-image "${spec}": the agent image is always named ${AGENT_REPOSITORY}:VERSION; drop the =NAME`,
    );
}

/**
 * The spec to open: a local source must be named to open, and its real name (the tag is the
 * version) is only known once its config is read, so it opens under the fixed repository.
 */
export function agentSourceSpec(spec: string): string {
  return parseSourceSpec(spec).transport === 'docker'
    ? spec
    : `${spec}=${AGENT_REPOSITORY}:unversioned`;
}

export function checkAgentVersion(version: string, where: string): string {
  // JSON.stringify: a control character is shown escaped, and the message stays one line
  if (!isAgentVersion(version))
    throw new OciError(
      'INVALID_CONFIG',
      `${where} ${JSON.stringify(version)} is not an agent version: it must be ${AGENT_VERSION_RULE}`,
    );
  return version;
}

/**
 * The agent's version from its image config's label, or from --agent-version; both given must
 * agree (a tarball rebuilt under a new version with a stale label would loop the upgrade).
 */
export async function agentImageVersion(
  blobs: { digest: string; size: number; mediaType: string }[],
  source: ImageSource,
  cache: BlobCache,
  flag?: string,
): Promise<string> {
  const config = blobs.find((b) => CONFIG_MEDIA_TYPES.includes(b.mediaType));
  let label: string | undefined;
  if (config && config.size <= MAX_CONFIG_BYTES) {
    const path = await cache.fetch(config.digest, config.size, (offset) =>
      source.getBlob(config.digest, config.size, offset),
    );
    const doc = JSON.parse(await readFile(path, 'utf8')) as {
      config?: { Labels?: Record<string, unknown> };
    };
    const v = doc.config?.Labels?.[VERSION_LABEL];
    if (typeof v === 'string' && v) label = v;
  }
  if (flag !== undefined && label !== undefined && flag !== label) {
    throw new OciError(
      'INVALID_CONFIG',
      `--agent-version ${flag} contradicts the agent image's ${VERSION_LABEL} label, ${label}`,
    );
  }
  const version = flag ?? label;
  if (version === undefined)
    throw new OciError(
      'INVALID_CONFIG',
      `the agent image has no ${VERSION_LABEL} label: give --agent-version`,
    );
  return checkAgentVersion(
    version,
    flag !== undefined ? '--agent-version' : `the agent image's ${VERSION_LABEL} label`,
  );
}

/** The image entry renamed to the fixed name, and bundle.json's agent field. */
export function asAgentImage(
  entry: BundleImage,
  version: string,
): { entry: BundleImage; agent: BundleAgent } {
  const renamed: BundleImage = { ...entry, repository: AGENT_REPOSITORY, tag: version };
  delete renamed.component;
  return { entry: renamed, agent: { version, repository: AGENT_REPOSITORY, digest: entry.digest } };
}
