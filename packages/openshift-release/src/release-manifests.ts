/**
 * The release payload's own manifests (release-manifests/*.yaml, what the CVO applies): which
 * workloads pull one of the payload's images with imagePullPolicy: Always. On a node without a
 * registry such a pull fails even though the image is loaded and pinned.
 */
import { parseAllDocuments } from 'yaml';
import { nestingTooDeep, valueTooDeep } from '@offline-bundle/host';
import { digestReference, formatReference, type ImageReference } from '@offline-bundle/oci';

const RELEASE_MANIFESTS_DIR = 'release-manifests/';

/** Top-level YAML files of release-manifests/ (the CVO reads only those). */
export const isReleaseManifest = (name: string): boolean =>
  name.startsWith(RELEASE_MANIFESTS_DIR) &&
  /^[^/]+\.ya?ml$/.test(name.slice(RELEASE_MANIFESTS_DIR.length));

export interface PullAlwaysWorkload {
  /** namespace/Kind/name (namespace empty for cluster-scoped objects). */
  object: string;
  image: string;
  /** The manifest file it was found in. */
  file: string;
}

type Spec = {
  containers?: { image?: unknown; imagePullPolicy?: unknown }[];
  initContainers?: { image?: unknown; imagePullPolicy?: unknown }[];
};

// A manifest parsed from YAML: any shape, read through optional chains.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Manifest = Record<string, any>;

function podSpec(doc: Manifest): Spec | undefined {
  switch (doc.kind) {
    case 'Pod':
      return doc.spec;
    case 'CronJob':
      return doc.spec?.jobTemplate?.spec?.template?.spec;
    case 'Deployment':
    case 'DaemonSet':
    case 'StatefulSet':
    case 'ReplicaSet':
    case 'Job':
      return doc.spec?.template?.spec;
    default:
      return undefined;
  }
}

/** Workloads in `files` (name → bytes) whose containers pull one of `images` with Always. */
export function pullAlwaysWorkloads(
  files: ReadonlyMap<string, Buffer>,
  images: readonly ImageReference[],
): PullAlwaysWorkload[] {
  const names = new Set<string>();
  const digests = new Set<string>();
  for (const r of images) {
    names.add(formatReference(r));
    if (r.digest) {
      names.add(digestReference(r, r.digest));
      digests.add(r.digest);
    }
  }
  const out: PullAlwaysWorkload[] = [];
  for (const [file, bytes] of [...files].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!isReleaseManifest(file)) continue;
    const text = bytes.toString('utf8');
    // skipped like a file that does not parse: the yaml library aborts the process on a few MB of `[[[[…`
    if (nestingTooDeep(text, 'yaml') !== undefined) continue;
    for (const d of parseAllDocuments(text)) {
      if (d.errors.length) continue; // the CVO's business; a warning scan must not fail a build
      const doc = d.toJS() as Manifest | null;
      if (valueTooDeep(doc)) continue;
      const spec = doc && typeof doc === 'object' ? podSpec(doc) : undefined;
      if (!spec) continue;
      for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
        if (c?.imagePullPolicy !== 'Always' || typeof c.image !== 'string') continue;
        const digest = /@(sha256:[0-9a-f]{64})$/.exec(c.image)?.[1];
        if (!names.has(c.image) && !(digest && digests.has(digest))) continue;
        out.push({
          object: `${doc!.metadata?.namespace ?? ''}/${doc!.kind}/${doc!.metadata?.name ?? '?'}`,
          image: c.image,
          file,
        });
      }
    }
  }
  return out;
}
