/**
 * The bundle file's JSON Schema (draft-07, as systemd/config.schema.json). It is the one
 * definition: the file is validated against it, `bundle schema` prints it (shipped as
 * share/bundle/bundle.schema.json, and kept as builder/bundle.schema.json for editors), and the
 * man page lists its fields from it. Keys are create's flags in camelCase.
 */

import {
  FORMAT_VERSIONS,
  MAX_RELEASE_PATH_HOPS,
  VERSIONED_FEATURES,
  WRITABLE_VERSIONS,
} from '@offline-bundle/format';
import { BLOB_ORDERS, type BlobOrder } from '../blob-order.js';
import { PIECE_MODES, type PieceMode } from '../piece-mode.js';

export const BUNDLE_FILE_API_VERSION = 'offline-bundle/v1alpha1';
export const BUNDLE_FILE_KIND = 'Bundle';

const path = (description: string) => ({
  type: 'string',
  minLength: 1,
  description: `${description} (relative to the file's directory)`,
});
const paths = (description: string) => ({
  type: 'array',
  items: { type: 'string', minLength: 1 },
  description: `${description} (relative to the file's directory)`,
});

const release = {
  description:
    'The OpenShift release image, by pull spec, or picked from an update graph by channel and version. Its payload images come along.',
  oneOf: [
    { type: 'string', minLength: 1, description: "The release image's pull spec (as --release)." },
    {
      type: 'object',
      additionalProperties: false,
      required: ['channel'],
      properties: {
        channel: {
          type: 'string',
          minLength: 1,
          description:
            'The update channel (stable-4.14): its releases in the update graph are the candidates.',
        },
        version: {
          type: 'string',
          minLength: 1,
          description: 'This exact version of the channel.',
        },
        versionRange: {
          type: 'string',
          minLength: 1,
          description:
            'A semver range (">=4.14.30 <4.15.0"): the newest version of the channel in it. Without version and versionRange: the channel\'s newest.',
        },
        from: {
          type: 'string',
          minLength: 1,
          description: `The version the cluster runs (as --release-from): the bundle carries every release of the update graph's shortest path from it to the release (4.14.30 → 4.15.40 → 4.16.2, an EUS-to-EUS upgrade from one stick), each payload once, at most ${MAX_RELEASE_PATH_HOPS} releases.`,
        },
        updateGraph: {
          type: 'string',
          minLength: 1,
          description:
            "A Cincinnati update graph JSON file (nodes with version and payload, edges), as https://api.openshift.com/api/upgrades_info/v1/graph?channel=CHANNEL&arch=ARCH answers with Accept: application/json (relative to the file's directory); --update-graph overrides it.",
        },
      },
      not: { required: ['version', 'versionRange'] },
    },
  ],
};

const operators = {
  type: 'array',
  description:
    "Operators from OLM catalog images (oc-mirror v2's operators: shape): the selected operator bundle images and their relatedImages come along, and the catalog image itself, whole.",
  items: {
    type: 'object',
    additionalProperties: false,
    required: ['catalog', 'packages'],
    properties: {
      catalog: {
        type: 'string',
        minLength: 1,
        description:
          'The catalog image (file-based catalog under the directory of its operators.operatorframework.io.index.configs.v1 label).',
      },
      packages: {
        type: 'array',
        minItems: 1,
        description: 'The packages to take.',
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['name'],
          properties: {
            name: { type: 'string', minLength: 1, description: 'The package name.' },
            channels: {
              type: 'array',
              description:
                "Its channels (default: the package's defaultChannel); each gives its head, or every version from minVersion to maxVersion.",
              items: {
                type: 'object',
                additionalProperties: false,
                required: ['name'],
                properties: {
                  name: { type: 'string', minLength: 1, description: 'The channel name.' },
                  minVersion: {
                    type: 'string',
                    minLength: 1,
                    description: 'The lowest bundle version taken.',
                  },
                  maxVersion: {
                    type: 'string',
                    minLength: 1,
                    description: 'The highest bundle version taken.',
                  },
                },
              },
            },
          },
        },
      },
    },
  },
};

export const BUNDLE_FILE_SCHEMA = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  $id: 'https://offline-bundle.invalid/bundle/bundle.schema.json',
  title: 'offline-bundle bundle file (bundle create -f bundle.yaml)',
  description:
    'What goes into a bundle. Every key is also a flag of "bundle create"; a flag given on the command line overrides the key, and repeatable flags (--image, --upgrade-from, --release-signature) add to the file\'s lists.',
  type: 'object',
  additionalProperties: false,
  required: ['apiVersion', 'kind'],
  properties: {
    apiVersion: {
      const: BUNDLE_FILE_API_VERSION,
      description: `Always ${BUNDLE_FILE_API_VERSION}.`,
    },
    kind: { const: BUNDLE_FILE_KIND, description: `Always ${BUNDLE_FILE_KIND}.` },
    release,
    operators,
    charts: {
      type: 'array',
      items: { type: 'string', minLength: 1 },
      description:
        'Helm charts stored as OCI artifacts, each oci://HOST/REPO/NAME:VERSION (as helm push names it), HOST/REPO/NAME:VERSION or HOST/REPO/NAME@sha256:DIGEST (as --chart): carried like images and served by the node\'s registry while it loads (and by "bundle-agent serve"), never pulled or pinned; "bundle inspect" lists them apart. A chart\'s images go under images.',
    },
    images: {
      type: 'array',
      items: { type: 'string', minLength: 1 },
      description:
        "Images to add, each an --image source: docker://REF (the default), oci:DIR[:REF], oci-archive:FILE[:REF], docker-archive:FILE[:REF], dir:DIR, with =REGISTRY/REPO:TAG to name a local one; relative paths are taken from the file's directory.",
    },
    imagesFile: path(
      "A file with one image source per line, # comments (as --images-file); relative paths in its lines are taken from this file's directory too",
    ),
    agentImage: {
      type: 'string',
      minLength: 1,
      description:
        'A bundle-agent image (any images source): nodes switch to it once the bundle is Ready (as --agent-image).',
    },
    agentVersion: {
      type: 'string',
      minLength: 1,
      description:
        "The agent image's version, when it has no org.opencontainers.image.version label.",
    },
    arch: {
      type: 'string',
      minLength: 1,
      description:
        'The platform kept from multi-arch images: amd64 (default), arm64, linux/arm/v7.',
    },
    allPlatforms: { type: 'boolean', description: 'Keep every platform of multi-arch images.' },
    version: {
      type: 'string',
      minLength: 1,
      description: 'The release version the cluster will report (required without release).',
    },
    name: {
      type: 'string',
      minLength: 1,
      description: 'A human name of the release (default: the version).',
    },
    upgradeFrom: {
      type: 'array',
      items: { type: 'string', minLength: 1 },
      description:
        "Versions the cluster may run before this one (added to the release's own list).",
    },
    releaseSignatures: paths(
      "Signature files of the release image, a signature store's signature-N files (as --release-signature)",
    ),
    signatureStore: {
      type: 'string',
      minLength: 1,
      description:
        'Take every release signature from this store (file:// or https://.../signatures/openshift/release).',
    },
    releaseKeyring: path('OpenPGP public keys the release signatures must verify with'),
    key: path('The private key (PEM) to sign with'),
    passphraseFile: path("The encrypted key's passphrase, on the file's first line"),
    output: path('The bundle file to write (NAME.bundle)'),
    cache: path('The content-addressed blob cache'),
    jobs: { type: 'integer', minimum: 1, description: 'Parallel downloads (default 4).' },
    authfile: path('The registry credentials file'),
    certDir: path('CAs and a client certificate for every registry'),
    tlsVerify: {
      type: 'boolean',
      description: 'Verify registry TLS certificates (default true; false also allows plain http).',
    },
    registriesConf: path("A containers-registries.conf(5) file, instead of the system's"),
    level: {
      type: 'integer',
      minimum: 1,
      maximum: 19,
      description: 'The zstd compression level, 1-19 (default 3).',
    },
    formatVersion: {
      type: 'integer',
      enum: [...WRITABLE_VERSIONS],
      description: `bundle.json's format version (as --format-version): ${WRITABLE_VERSIONS.join(' or ')} by default the oldest that carries what the bundle holds (so it reaches agents not yet upgraded).`,
    },
    blobOrder: {
      type: 'string',
      enum: [...BLOB_ORDERS],
      description: `The order blobs are written in (as --blob-order): digest (default; every bundle-agent reads it) or pull (image by image as a runtime pulls them; needs format version 3, bundle-agent ${FORMAT_VERSIONS[VERSIONED_FEATURES['blobs in pull order']]!.minReader} or later).`,
    },
    pieces: {
      type: 'string',
      enum: [...PIECE_MODES],
      description:
        'Per-piece digests in bundle.json (as --pieces): on (default; agents fetching from peers check each 4 MiB piece as it arrives) or none.',
    },
  },
} as const;

/** Keys other tools' files have that this one refuses by name (not implemented: a clear line, not "unknown field"). */
export const REFUSED_KEYS: Record<string, string> = {
  helm: "helm: is an ImageSetConfiguration's field; here, list each chart stored in a registry under charts: (oci://HOST/REPO/NAME:VERSION)",
};

/** A release picked from an update graph. */
export interface ReleaseByChannel {
  channel: string;
  version?: string;
  versionRange?: string;
  from?: string;
  updateGraph?: string;
}

/** The bundle file as read: paths already taken from the file's directory. */
export interface BundleFile {
  release?: string | ReleaseByChannel;
  operators?: OperatorSelection[];
  images?: string[];
  charts?: string[];
  imagesFile?: string;
  agentImage?: string;
  agentVersion?: string;
  arch?: string;
  allPlatforms?: boolean;
  version?: string;
  name?: string;
  upgradeFrom?: string[];
  releaseSignatures?: string[];
  signatureStore?: string;
  releaseKeyring?: string;
  key?: string;
  passphraseFile?: string;
  output?: string;
  cache?: string;
  jobs?: number;
  authfile?: string;
  certDir?: string;
  tlsVerify?: boolean;
  registriesConf?: string;
  level?: number;
  formatVersion?: number;
  blobOrder?: BlobOrder;
  pieces?: PieceMode;
  /** Parts of at most this many bytes (as --split-size): an ImageSetConfiguration's archiveSize. */
  splitSize?: number;
}

/** Operators of a catalog, and where in the file they are named. */
export interface OperatorSelection {
  catalog: string;
  packages: {
    name: string;
    channels?: { name: string; minVersion?: string; maxVersion?: string }[];
  }[];
  where: string;
}

/** Names a place in the file, "bundle.yaml:12 (release.channel)", for messages. */
export type Locate = (path: (string | number)[]) => string;

/** A list for a message: the first `most` items, then how many more ("a, b, c and 12 more"). */
export function someOf(items: string[], most = 10): string {
  const more = items.length - most;
  return more > 0 ? `${items.slice(0, most).join(', ')} and ${more} more` : items.join(', ');
}

/** Most problems of a file one error lists: a file of 150 000 unknown keys gets a line, not megabytes. */
export const MAX_PROBLEMS_SHOWN = 20;

/** The first MAX_PROBLEMS_SHOWN problems, "; "-joined, and how many more there are. */
export function someProblems(problems: string[]): string {
  const more = problems.length - MAX_PROBLEMS_SHOWN;
  return problems.slice(0, MAX_PROBLEMS_SHOWN).join('; ') + (more > 0 ? `; and ${more} more` : '');
}

export interface LoadedBundleFile {
  file: BundleFile;
  /** Where each of file.images is written, for messages about it. */
  imagesWhere: string[];
  /** Where each of file.charts is written. */
  chartsWhere?: string[];
  /** Where the release is named. */
  releaseWhere?: string;
  /** What was read but is not used (an ImageSetConfiguration's graph: true). */
  warnings: string[];
}

interface Described {
  description?: string;
  properties?: Record<string, Described>;
  oneOf?: Described[];
  items?: Described;
}

/** Every field with its description, nested ones as release.channel: for the man page. */
export function schemaFields(
  schema: Described = BUNDLE_FILE_SCHEMA as Described,
  prefix = '',
): [string, string][] {
  const out: [string, string][] = [];
  for (const [key, field] of Object.entries(schema.properties ?? {})) {
    const name = `${prefix}${key}`;
    out.push([name, field.description ?? '']);
    for (const variant of field.oneOf ?? []) out.push(...schemaFields(variant, `${name}.`));
    if (field.items?.properties) out.push(...schemaFields(field.items, `${name}[].`));
    out.push(...schemaFields({ properties: field.properties ?? {} }, `${name}.`));
  }
  return out;
}
