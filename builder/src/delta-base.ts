// `bundle create --base`: the previous release a delta is made against. Only its listing is
// used (which blobs it holds, its name and version, its bundle.json's digest): a bare
// bundle.json will do, signed or not, since the node holds every filled blob to the new
// bundle's own signed digests.
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  BUNDLE_JSON,
  MAX_BUNDLE_JSON_BYTES,
  baseLabel,
  bundleIdentity,
  compareVersions,
  namesSplitBundle,
  parseManifestBytes,
  readHeader,
  withBundle,
  type BundleBase,
  type BundleManifest,
} from '@offline-bundle/format';
import { readSmallFile } from '@offline-bundle/host';
import { OciError } from '@offline-bundle/oci';

/** The base as read: its signed description's digest and what it lists. */
export interface DeltaBase {
  path: string;
  manifest: BundleManifest;
  ref: BundleBase;
}

const ZSTD_FRAME = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
const FIX = "give the previous release's NAME.bundle (or its parts, or its bundle.json)";

const notABase = (path: string, why: string, cause?: unknown) =>
  new OciError(
    'INVALID_CONFIG',
    `--base ${path} is not a bundle, a bundle's parts or a bundle.json (${why}): ${FIX}`,
    cause ? { cause } : undefined,
  );

/** Whether `file` starts as a bundle does (a zstd frame), read from its first four bytes. */
async function startsAsBundle(file: string): Promise<boolean> {
  const fh = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!(await fh.stat()).isFile()) return false;
    const head = Buffer.alloc(ZSTD_FRAME.length);
    const { bytesRead } = await fh.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.equals(ZSTD_FRAME);
  } finally {
    await fh.close();
  }
}

/** bundle.json's bytes from a bundle, its parts, an extracted layout directory or the file itself. */
async function baseDescription(path: string): Promise<Buffer> {
  if (await namesSplitBundle(path))
    return withBundle(path, async (source) => (await readHeader(source)).manifestBytes);
  const st = await stat(path).catch((err: NodeJS.ErrnoException) => {
    throw notABase(path, err.code === 'ENOENT' ? 'no such file' : err.message, err);
  });
  const file = st.isDirectory() ? join(path, BUNDLE_JSON) : path;
  // a bundle's head is read (bounded) through the format reader; anything else must be a bundle.json
  if (await startsAsBundle(file))
    return withBundle(file, async (source) => (await readHeader(source)).manifestBytes);
  return (await readSmallFile(file, MAX_BUNDLE_JSON_BYTES)).bytes;
}

/**
 * Reads the base named by --base: a whole bundle, a bundle's parts, or a bare bundle.json
 * (or a directory holding one, as `bundle extract` leaves). Refused in one line when it is none.
 */
export async function readDeltaBase(path: string): Promise<DeltaBase> {
  let bytes: Buffer;
  try {
    bytes = await baseDescription(path);
  } catch (err) {
    if (err instanceof OciError) throw err;
    throw notABase(path, (err as Error).message, err);
  }
  let manifest: BundleManifest;
  try {
    manifest = parseManifestBytes(bytes);
  } catch (err) {
    throw notABase(path, (err as Error).message, err);
  }
  const r = manifest.release;
  return {
    path,
    manifest,
    ref: { bundleJson: bundleIdentity(bytes), name: r.name, version: r.version },
  };
}

/**
 * A delta is made against an earlier release of the same stream and arch: same name (unless
 * both names are only their versions, the default, where the version order alone counts),
 * a lower version (the order the agent's downgrade check uses).
 */
export function checkDeltaBase(
  base: DeltaBase,
  release: { name: string; version: string; arch: string },
): void {
  const b = base.manifest.release;
  const refuse = (why: string) =>
    new OciError(
      'INVALID_CONFIG',
      `--base ${base.path} is ${baseLabel(b)} (${b.arch}), ${why}: a delta is made against an earlier release of the same stream; give that release's bundle, or build without --base`,
    );
  const unnamed = b.name === b.version && release.name === release.version;
  if (!unnamed && b.name !== release.name)
    throw refuse(`another release stream than ${release.name}`);
  if (b.arch !== release.arch) throw refuse(`for another arch than ${release.arch}`);
  if (compareVersions(b.version, release.version) >= 0)
    throw refuse(`not earlier than ${release.version}`);
}

/** The blobs of `blobs` the base lists: what the delta leaves out. */
export function sharedWithBase(base: DeltaBase, blobs: Iterable<{ digest: string }>): Set<string> {
  const held = new Set(base.manifest.blobs.map((b) => b.digest));
  return new Set([...blobs].map((b) => b.digest).filter((d) => held.has(d)));
}
