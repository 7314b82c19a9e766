// A blob file swapped for a FIFO under a running registry (serve DIR, the agent's staging).
// Opening a FIFO with no writer blocks: each such GET held one of libuv's four pool threads,
// so four of them stopped every file read in the process, other blobs and the shutdown
// included. Each open must be refused at once, and other blobs still served. Before the fix
// these cases hang until tap's timeout.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { LayoutStore, type Catalog } from '@offline-bundle/registry';
import { StagingStore } from '@offline-bundle/agent';
import type { BundleManifest } from '@offline-bundle/format';
import { tmpdir } from '../helpers/tmp.mjs';

const blobs = [randomBytes(300_000), randomBytes(2_000_000)];
const digests = blobs.map((b) => `sha256:${createHash('sha256').update(b).digest('hex')}`);
const catalog: Catalog = {
  repositories: new Map(),
  sources: new Map(),
  shortNames: new Map(),
  ambiguous: new Map(),
  manifests: new Map(),
  blobs: new Map(digests.map((d, i) => [d, blobs[i]!.length])),
};
const blobFile = (dir: string, d: string) => join(dir, 'blobs', 'sha256', d.slice(7));

async function layout(t: Tap.Test): Promise<string> {
  const dir = await tmpdir(t);
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  for (const [i, d] of digests.entries()) await writeFile(blobFile(dir, d), blobs[i]!);
  return dir;
}

async function body(s: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const toFifo = async (path: string) => {
  await rm(path);
  execFileSync('mkfifo', [path]);
};

for (const verified of [true, false]) {
  t.test(
    `LayoutStore (${verified ? 'verified staging' : 'serve DIR, re-checked'}): a FIFO in a blob's place is refused at once, the other blob still served`,
    { timeout: 20_000 },
    async (t) => {
      const dir = await layout(t);
      const store = await LayoutStore.open(dir, catalog, { verified });
      await toFifo(blobFile(dir, digests[0]!));
      // more than libuv's four pool threads
      const refused = await Promise.allSettled(
        Array.from({ length: 6 }, () => store.open(digests[0]!, 0, blobs[0]!.length)),
      );
      for (const r of refused)
        t.match(
          r,
          { status: 'rejected', reason: { code: 'LAYOUT_INVALID' } },
          'refused with the layout error',
        );
      t.ok(
        (await body(await store.open(digests[1]!, 0, blobs[1]!.length))).equals(blobs[1]!),
        'the other blob is served in full afterwards',
      );
    },
  );
}

t.test(
  "StagingStore (bundle-agent load): a FIFO in a blob's place is refused at once, the other blob still served",
  { timeout: 20_000 },
  async (t) => {
    const dir = await layout(t);
    const store = new StagingStore(`${dir}.partial`, dir, catalog, {
      images: [],
    } as unknown as BundleManifest);
    for (const d of digests) store.verified(d);
    await toFifo(blobFile(dir, digests[0]!));
    const refused = await Promise.allSettled(
      Array.from({ length: 6 }, () => store.open(digests[0]!, 0, blobs[0]!.length)),
    );
    for (const r of refused) t.equal(r.status, 'rejected', 'refused');
    t.ok(
      (await body(await store.open(digests[1]!, 0, blobs[1]!.length))).equals(blobs[1]!),
      'the other blob is served in full afterwards',
    );
  },
);

t.test(
  'LayoutStore.open: a FIFO found at start is refused, not waited on',
  { timeout: 20_000 },
  async (t) => {
    const dir = await layout(t);
    await toFifo(blobFile(dir, digests[1]!));
    await t.rejects(LayoutStore.open(dir, catalog), { code: 'LAYOUT_INVALID' });
  },
);
