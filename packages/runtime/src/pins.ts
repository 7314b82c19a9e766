// CRI-O pinned_images drop-in (crio.conf(5), table [crio.image], key pinned_images: images
// excluded from the kubelet's garbage collection; exact names, or glob/keyword patterns).
import path from 'node:path';
import { parse, stringify } from 'smol-toml';
import { RuntimeError } from './errors.js';
import {
  MANAGED_MARKER,
  assertFileName,
  assertNotForeign,
  readIfExists,
  writeFileAtomic,
} from './files.js';
import { assertImageRef } from './validate.js';

function normalize(images: string[]): string[] {
  if (!Array.isArray(images))
    throw new RuntimeError('INVALID_SPEC', 'pinned images must be an array of strings');
  for (const i of images) assertImageRef(i);
  return [...new Set(images)].sort();
}

/**
 * `[crio.image]\npinned_images = [ ... ]`, sorted and deduplicated, after the offline-bundle
 * marker line. CRI-O applies crio.conf.d files in lexical order and a later file's
 * pinned_images replaces an earlier one's: the caller passes the complete list it wants.
 */
export function renderPinsDropIn(images: string[]): string {
  const pinned = normalize(images);
  return `${MANAGED_MARKER}\n# crio.conf(5) drop-in: images of the running and the incoming release, kept from image garbage collection.\n\n${stringify({ crio: { image: { pinned_images: pinned } } })}`;
}

/** Write `<dir>/<name>` atomically (see renderPinsDropIn); returns its path. */
export async function writePinsDropIn(
  dir: string,
  name: string,
  images: string[],
): Promise<string> {
  assertFileName(name);
  const content = renderPinsDropIn(images);
  const file = path.join(dir, name);
  await assertNotForeign(file);
  await writeFileAtomic(file, content);
  return file;
}

/**
 * The `crio.image.pinned_images` of a CRI-O config file (any file: reading never changes
 * it), sorted; [] when the file or the key is missing. Not TOML, or not a list of strings:
 * READ_FAILED.
 */
export async function readPinsDropIn(file: string): Promise<string[]> {
  const text = await readIfExists(file);
  if (text === undefined) return [];
  let doc: Record<string, unknown>;
  try {
    doc = parse(text) as Record<string, unknown>;
  } catch (e) {
    const why = e instanceof Error ? e.message.split('\n', 1)[0] : String(e);
    throw new RuntimeError('READ_FAILED', `${file} is not valid TOML: ${why}`, { cause: e });
  }
  const crio = doc['crio'];
  const image =
    crio && typeof crio === 'object' ? (crio as Record<string, unknown>)['image'] : undefined;
  const pinned =
    image && typeof image === 'object'
      ? (image as Record<string, unknown>)['pinned_images']
      : undefined;
  if (pinned === undefined) return [];
  if (!Array.isArray(pinned) || !pinned.every((p) => typeof p === 'string')) {
    throw new RuntimeError(
      'READ_FAILED',
      `${file}: crio.image.pinned_images is not a list of strings`,
    );
  }
  return [...new Set(pinned as string[])].sort();
}
