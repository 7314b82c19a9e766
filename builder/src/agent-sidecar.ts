// The agent image beside the bundle, for a node that has no agent yet: an OCI archive of the one
// agent image a bundle carries (bundle-agent-VERSION-ARCH.oci.tar) and a signed statement about
// it (….oci.tar.sig). A node's bootstrap (deploy/openshift/bundle-agent-bootstrap.sh) has only
// bash, coreutils, openssl and skopeo: it cannot pull one image out of a zstd bundle, but it can
// check a signature with `openssl`, a sha256 with `sha256sum` and load an archive with skopeo.
//
// The statement (ASCII lines "KEY VALUE", in this order; the signed bytes are every line before
// the last one, the last is "signature BASE64"):
//
//   offline-bundle-agent-image 1
//   file bundle-agent-0.9.0-amd64.oci.tar      the archive's name, beside this file
//   size 41234567                              its bytes
//   sha256 <64 hex>                            its sha256
//   manifest sha256:<64 hex>                   the image's manifest digest (what containers-storage keeps)
//   image localhost/offline-bundle/bundle-agent:0.9.0
//   version 0.9.0
//   arch amd64                                 the bundle's architecture (the image config's too)
//   signer sha256:<64 hex>                     fingerprint of the signing key (the bundle's)
//   signature <base64>                         ECDSA P-256 (DER, over sha256) or Ed25519 (raw)
//
// Checked with `openssl dgst -sha256 -verify KEY.pub -signature SIG STATEMENT` (ECDSA) or
// `openssl pkeyutl -verify -pubin -inkey KEY.pub -rawin -in STATEMENT -sigfile SIG` (Ed25519).
import { createPublicKey, type KeyObject } from 'node:crypto';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import {
  AGENT_REPOSITORY,
  BundleRandomReader,
  FormatError,
  OCI_LAYOUT,
  OCI_LAYOUT_CONTENT,
  INDEX_JSON,
  blobPath,
  canonicalHeader,
  fingerprint,
  readHeader,
  signBytes,
  withBundle,
  type BundleSource,
  verifyBytes,
  type BundleManifest,
} from '@offline-bundle/format';
import { OciError, isIndexMediaType, isManifestMediaType, newSha256 } from '@offline-bundle/oci';
import { createExclusive, writeFileAtomic } from '@offline-bundle/host';

export const STATEMENT_FORMAT = 'offline-bundle-agent-image 1';
export const SIDECAR_SUFFIX = '.oci.tar.sig';
/** A manifest or config larger than this is not an image's (read whole into memory). */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
const MANIFEST_TYPES = [
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
];
const REF_NAME_ANNOTATION = 'org.opencontainers.image.ref.name';
/** The full name containerd's import (ctr, k3s's agent/images directory) gives the image; skopeo and podman read the tag above. */
const CONTAINERD_NAME_ANNOTATION = 'io.containerd.image.name';

export interface AgentSidecar {
  archive: string;
  statement: string;
  size: number;
  sha256: string;
  manifest: string;
  image: string;
  version: string;
  arch: string;
  signer: string;
}

/** `bundle-agent-VERSION-ARCH.oci.tar` */
export const archiveName = (version: string, arch: string) =>
  `bundle-agent-${version}-${arch}.oci.tar`;

/** The statement's signed lines (each ending in a newline). */
function statementText(s: Omit<AgentSidecar, 'archive' | 'statement'> & { file: string }): string {
  return [
    STATEMENT_FORMAT,
    `file ${s.file}`,
    `size ${s.size}`,
    `sha256 ${s.sha256}`,
    `manifest ${s.manifest}`,
    `image ${s.image}`,
    `version ${s.version}`,
    `arch ${s.arch}`,
    `signer ${s.signer}`,
  ]
    .map((l) => `${l}\n`)
    .join('');
}

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

const ioError = (what: string, err: unknown) => {
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOSPC' || e.code === 'EDQUOT')
    return new OciError(
      'NO_SPACE',
      `${what}: the filesystem is full: free some space or write elsewhere (-o DIR)`,
      { cause: err },
    );
  if (e.code === 'EACCES' || e.code === 'EPERM' || e.code === 'EROFS')
    return new OciError('NOT_WRITABLE', `${what}: ${e.message}`, { cause: err });
  return err;
};

/**
 * Writes the agent image `bundle` carries as `DIR/bundle-agent-VERSION-ARCH.oci.tar` and its
 * signed statement, signed with `key`, which must be the key that signed the bundle (the
 * statement vouches for nothing the bundle's signature does not). Every byte comes from the
 * bundle through its seek index, each blob held to the digest the signed bundle.json lists.
 * Both files are written under temporary names and renamed, the archive first: a reader that
 * sees the statement sees the whole archive.
 */
export async function exportAgentSidecar(
  bundle: string,
  key: KeyObject,
  dir: string,
  opts: { force?: boolean; signal?: AbortSignal } = {},
): Promise<AgentSidecar> {
  return withBundle(bundle, (source) => exportFrom(source, key, dir, opts));
}

async function exportFrom(
  source: BundleSource,
  key: KeyObject,
  dir: string,
  opts: { force?: boolean; signal?: AbortSignal },
): Promise<AgentSidecar> {
  const bundle = source.identity;
  const { manifest, manifestBytes, signature } = await readHeader(source);
  const pub = createPublicKey(key);
  if (!verifyBytes(manifestBytes, signature, pub)) {
    throw new FormatError(
      'UNTRUSTED_KEY',
      `${bundle} is not signed by this key (${fingerprint(pub)}): export its agent image with the key that signed it`,
    );
  }
  const agent = manifest.agent;
  if (!agent)
    throw new OciError(
      'NOT_FOUND',
      `${bundle} carries no agent image: build it with bundle create --agent-image SOURCE`,
    );
  const arch = manifest.release.arch;
  const archive = path.join(dir, archiveName(agent.version, arch));
  const statementFile = `${archive}.sig`;
  if (!opts.force) {
    for (const f of [archive, statementFile]) {
      if (
        await stat(f).then(
          () => true,
          () => false,
        )
      )
        throw new OciError('OUTPUT_EXISTS', `${f} exists: pass --force to replace it`);
    }
  }
  await mkdir(dir, { recursive: true }).catch((err: unknown) => {
    throw ioError(`cannot make ${dir}`, err);
  });
  const reader = await BundleRandomReader.open(source, manifest);
  const image = await agentImageBlobs(reader, manifest, agent.digest);
  const sha256 = await writeArchive(reader, image, agent.version, archive, opts.signal);
  const size = (await stat(archive)).size;
  const fields = {
    file: path.basename(archive),
    size,
    sha256,
    manifest: image.manifest.digest,
    image: `${AGENT_REPOSITORY}:${agent.version}`,
    version: agent.version,
    arch,
    signer: fingerprint(pub),
  };
  const signed = statementText(fields);
  const text = `${signed}signature ${signBytes(Buffer.from(signed), key).toString('base64')}\n`;
  await writeFileAtomic(statementFile, text).catch((err: unknown) => {
    throw ioError(`cannot write ${statementFile}`, err);
  });
  return { ...fields, archive, statement: statementFile };
}

/**
 * The agent image's manifest (its bytes), config and layers, each checked against bundle.json.
 * A multi-arch agent image (what `pnpm package` writes) is an index: the bundle holds its
 * manifest for the bundle's platform, and that one goes beside the bundle.
 */
async function agentImageBlobs(
  reader: BundleRandomReader,
  manifest: BundleManifest,
  digest: string,
  depth = 0,
): Promise<{ manifest: Descriptor & { bytes: Buffer }; blobs: Descriptor[] }> {
  const listed = manifest.blobs.find((b) => b.digest === digest);
  if (!listed || listed.size > MAX_JSON_BYTES)
    throw new FormatError(
      'INVALID_MANIFEST',
      `the agent image ${digest} is not a listed blob of a manifest's size`,
    );
  const bytes = await reader.readVerified(blobPath(digest));
  let doc: {
    mediaType?: string;
    config?: Descriptor;
    layers?: Descriptor[];
    manifests?: (Descriptor & { platform?: { os?: string; architecture?: string } })[];
  };
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new FormatError('INVALID_MANIFEST', `the agent image ${digest} is not a JSON manifest`);
  }
  const entry = manifest.images.find((i) => i.digest === digest);
  const mediaType = doc.mediaType ?? entry?.mediaType ?? '';
  if (isIndexMediaType(mediaType) && Array.isArray(doc.manifests) && depth === 0) {
    const arch = manifest.release.arch;
    const mine = doc.manifests.find(
      (m) =>
        m?.platform?.os === 'linux' &&
        m.platform.architecture === arch &&
        isManifestMediaType(m.mediaType) &&
        manifest.blobs.some((b) => b.digest === m.digest),
    );
    if (!mine)
      throw new FormatError(
        'INVALID_MANIFEST',
        `the agent image ${digest} (a multi-arch index) has no linux/${arch} image in the bundle: rebuild with an agent image of the bundle's architecture`,
      );
    return agentImageBlobs(reader, manifest, mine.digest, depth + 1);
  }
  if (!MANIFEST_TYPES.includes(mediaType) || !doc.config || !Array.isArray(doc.layers)) {
    throw new FormatError(
      'INVALID_MANIFEST',
      `the agent image ${digest} is not a single-platform image manifest (${mediaType || 'no media type'})`,
    );
  }
  // the bundle's architecture: a node checks the statement's arch, so it must be the image's
  if (doc.config.size > MAX_JSON_BYTES)
    throw new FormatError(
      'INVALID_MANIFEST',
      `the agent image's config is larger than ${MAX_JSON_BYTES} bytes`,
    );
  const config = JSON.parse(
    (await reader.readVerified(blobPath(doc.config.digest))).toString('utf8'),
  ) as { architecture?: unknown; os?: unknown };
  if (config.architecture !== manifest.release.arch || config.os !== 'linux') {
    throw new FormatError(
      'INVALID_MANIFEST',
      `the agent image is for ${String(config.os)}/${String(config.architecture)}, the bundle for linux/${manifest.release.arch}: rebuild with an agent image of the bundle's architecture`,
    );
  }
  const seen = new Set<string>();
  const blobs = [doc.config, ...doc.layers].filter(
    (b) => !seen.has(b.digest) && seen.add(b.digest),
  );
  return { manifest: { mediaType, digest, size: bytes.length, bytes }, blobs };
}

/**
 * The OCI archive (an uncompressed tar of an OCI image layout: oci-layout, index.json naming the
 * image VERSION and, for containerd, localhost/offline-bundle/bundle-agent:VERSION, its blobs), written to a temp file, synced, renamed. Returns its sha256 (hex).
 */
async function writeArchive(
  reader: BundleRandomReader,
  image: Awaited<ReturnType<typeof agentImageBlobs>>,
  version: string,
  file: string,
  signal?: AbortSignal,
): Promise<string> {
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        {
          mediaType: image.manifest.mediaType,
          digest: image.manifest.digest,
          size: image.manifest.size,
          annotations: {
            [REF_NAME_ANNOTATION]: version,
            [CONTAINERD_NAME_ANNOTATION]: `${AGENT_REPOSITORY}:${version}`,
          },
        },
      ],
    }),
  );
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  const hash = newSha256();
  const fh = await createExclusive(tmp).catch((err: unknown) => {
    throw ioError(`cannot write ${tmp}`, err);
  });
  let ok = false;
  try {
    const put = async (chunk: Buffer) => {
      // stopped (Ctrl-C): the temporary file goes, nothing is renamed
      signal?.throwIfAborted();
      hash.update(chunk);
      await fh.write(chunk);
    };
    const entry = async (name: string, size: number, data: Buffer | Readable) => {
      const header = canonicalHeader(name, size);
      if (!header) throw new FormatError('UNEXPECTED_ENTRY', `cannot name ${name} in a tar header`);
      await put(header);
      let n = 0;
      for await (const c of Buffer.isBuffer(data) ? [data] : data) {
        n += (c as Buffer).length;
        await put(c as Buffer);
      }
      if (n !== size)
        throw new FormatError('SIZE_MISMATCH', `${name} gave ${n} bytes, ${size} expected`);
      if (size % 512) await put(Buffer.alloc(512 - (size % 512)));
    };
    await entry(OCI_LAYOUT, OCI_LAYOUT_CONTENT.length, Buffer.from(OCI_LAYOUT_CONTENT));
    await entry(INDEX_JSON, index.length, index);
    await entry(blobPath(image.manifest.digest), image.manifest.size, image.manifest.bytes);
    for (const b of image.blobs)
      await entry(blobPath(b.digest), b.size, await reader.streamChecked(blobPath(b.digest)));
    await put(Buffer.alloc(1024));
    await fh.sync();
    ok = true;
  } catch (err) {
    throw ioError(`cannot write ${file}`, err);
  } finally {
    await fh.close();
    if (!ok) await rm(tmp, { force: true });
  }
  await rename(tmp, file);
  return hash.digest('hex');
}
