// What delta.test.ts and delta-base.test.ts share: generated releases whose images a and b are
// the same in every release (the shared base layers) and c is rebuilt in each, and `bundle
// create` over them in one directory with one key.
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
// @ts-expect-error: a JavaScript helper without type declarations
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, type KeyPair } from './lib.js';

// what gzip cannot shrink, as real layers: the shared ones outweigh the bundle's own overhead
const noise = (n: number) => randomBytes(n).toString('base64');
const SHARED = { a: noise(60_000), b: noise(40_000), lib: noise(10_000) };

export const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** The releases of `dir`, made with `keys`. */
export function deltaReleases(dir: string, keys: KeyPair) {
  /** A layout of release `v`: images a and b the same in every release, c rebuilt in each. */
  const layout = async (v: string): Promise<string> => {
    const l = path.join(dir, `layout-${v}`);
    const image = async (tag: string, files: Record<string, string>) =>
      writeImageLayout(l, {
        tag,
        platforms: [{ os: 'linux', architecture: 'amd64', layers: [files] }],
      });
    await image('a', { 'a.txt': SHARED.a });
    await image('b', { 'b.txt': SHARED.b, 'lib.txt': SHARED.lib });
    await image('c', { 'c.txt': `app ${v} `.repeat(3000) });
    return l;
  };
  const create = (v: string, out: string, extra: string[] = []) => {
    const l = path.join(dir, `layout-${v}`);
    return bundle([
      'create',
      '--quiet',
      '--version',
      v,
      '--key',
      keys.key,
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      path.join(dir, out),
      '--image',
      `oci:${l}:a=quay.io/acme/a:v1`,
      '--image',
      `oci:${l}:b=quay.io/acme/b:v1`,
      '--image',
      `oci:${l}:c=quay.io/acme/c:${v}`,
      ...extra,
    ]);
  };
  return { layout, create };
}
