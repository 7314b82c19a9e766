import { OciError } from './errors.js';
import { isDigest } from './digest.js';
import { isIndexMediaType, isManifestMediaType, MediaType } from './media-types.js';
import type { Platform } from './platform.js';

/** The most a manifest or index may have, from a registry or a directory (registries use 4 MiB too). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
  urls?: string[];
}

export interface ImageManifest {
  schemaVersion: 2;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
  subject?: Descriptor;
  annotations?: Record<string, string>;
}

export interface ImageIndex {
  schemaVersion: 2;
  mediaType?: string;
  manifests: Descriptor[];
  annotations?: Record<string, string>;
}

type ParsedManifest =
  | { kind: 'index'; mediaType: string; index: ImageIndex }
  | { kind: 'manifest'; mediaType: string; manifest: ImageManifest };

function checkDescriptor(d: unknown, where: string): Descriptor {
  const desc = d as Descriptor;
  if (
    !desc ||
    typeof desc !== 'object' ||
    typeof desc.mediaType !== 'string' ||
    typeof desc.digest !== 'string' ||
    !isDigest(desc.digest) ||
    !Number.isSafeInteger(desc.size) ||
    desc.size < 0
  ) {
    throw new OciError(
      'INVALID_MANIFEST',
      `${where}: descriptor needs mediaType, a sha256 digest and a size`,
    );
  }
  return desc;
}

/**
 * Parses manifest bytes; the media type comes from the document when it names one (OCI
 * and Docker both do), else from the transport's Content-Type.
 */
export function parseManifest(bytes: Uint8Array, contentType?: string): ParsedManifest {
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString('utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw new OciError('INVALID_MANIFEST', 'manifest is not JSON', { cause });
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw new OciError('INVALID_MANIFEST', 'manifest is not a JSON object');
  if (doc.schemaVersion !== 2)
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `manifest schemaVersion ${String(doc.schemaVersion)} is not supported (only 2)`,
    );
  let mediaType =
    typeof doc.mediaType === 'string' ? doc.mediaType : contentType?.split(';')[0]?.trim();
  if (!mediaType || mediaType === 'application/json' || mediaType === 'application/octet-stream') {
    mediaType = Array.isArray(doc.manifests) ? MediaType.OciIndex : MediaType.OciManifest;
  }
  if (isIndexMediaType(mediaType)) {
    if (!Array.isArray(doc.manifests))
      throw new OciError('INVALID_MANIFEST', 'image index has no manifests list');
    (doc.manifests as unknown[]).forEach((m, i) => checkDescriptor(m, `manifests[${i}]`));
    return { kind: 'index', mediaType, index: doc as unknown as ImageIndex };
  }
  if (isManifestMediaType(mediaType)) {
    checkDescriptor(doc.config, 'config');
    if (!Array.isArray(doc.layers))
      throw new OciError('INVALID_MANIFEST', 'image manifest has no layers list');
    (doc.layers as unknown[]).forEach((l, i) => checkDescriptor(l, `layers[${i}]`));
    return { kind: 'manifest', mediaType, manifest: doc as unknown as ImageManifest };
  }
  throw new OciError('UNSUPPORTED_MEDIA_TYPE', `manifest media type ${mediaType} is not supported`);
}
