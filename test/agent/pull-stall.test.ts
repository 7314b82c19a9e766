// A load never stalls silently (#24 item 5): a pull whose image moves no bytes out of the load's
// registry for preload.stallSeconds is cancelled and retried (preload.retries), then fails the
// load with PullStalled naming the image, nothing pinned; a stall that recovers on the retry
// ends with every image pulled and pinned. Real containerd pulls through the agent's real
// registry; the registry's store is a stand-in that stops sending one layer mid-blob (64 KiB
// in), as a stick or a disk that stops answering would.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { Writable } from 'node:stream';
import {
  createLogger,
  loadConfig,
  loadImages,
  reasonOf,
  runtimeTarget,
} from '@offline-bundle/agent';
import { readHeader, withBundleFile, type BundleManifest } from '@offline-bundle/format';
import { LayoutStore, catalogOf, type BlobStore } from '@offline-bundle/registry';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { BUNDLE, containerdNode, makeBundle, run } from './fixtures.js';

const STALL_AFTER = 64 * 1024;

/** The first `bytes` of `src`, then nothing more until the client goes away. */
function stallAfter(src: Readable, bytes: number): Readable {
  let sent = 0;
  const out = new Readable({
    read() {
      if (sent < bytes) src.resume();
    },
    destroy(err, cb) {
      src.destroy();
      cb(err);
    },
  });
  src.on('data', (chunk: Buffer) => {
    const part = chunk.subarray(0, bytes - sent);
    sent += part.length;
    if (part.length) out.push(part);
    src.pause();
  });
  return out;
}

/** A store that stalls the first `stalls` reads of `digest` mid-blob; every other read as the layout's. */
class StallingStore implements BlobStore {
  reads = 0;
  constructor(
    private readonly inner: BlobStore,
    private readonly digest: string,
    private readonly stalls: number,
  ) {}
  size(digest: string): number | undefined {
    return this.inner.size(digest);
  }
  async open(digest: string, start: number, end: number): Promise<Readable> {
    const body = await this.inner.open(digest, start, end);
    if (digest !== this.digest) return body;
    return this.reads++ < this.stalls && end - start > STALL_AFTER
      ? stallAfter(body, STALL_AFTER)
      : body;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const images = [
  { name: 'quay.io/acme/big:v1', files: { 'big.bin': randomBytes(2 * 1024 * 1024) } },
  { name: 'quay.io/acme/small:v1', files: { 'small.txt': 'small v1' } },
];

async function setUp(t: any) {
  const n = await containerdNode(
    t,
    'ob-pull-stall-',
    'preload:\n  stallSeconds: 2\n  retries: 1\n  concurrency: 2\n',
  );
  const file = await makeBundle(n.dir, {
    key: n.keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(n.dir, 'update.bundle'),
  });
  const layout = join(n.dir, 'layout');
  const x = await run(BUNDLE, ['extract', '--quiet', file, layout, '--key', n.keys.pub]);
  if (x.code !== 0) throw new Error(x.stderr);
  const m: BundleManifest = (await withBundleFile(file, readHeader)).manifest;
  const catalog = catalogOf(m);
  // the big image's layer: its only blob over a MiB
  const layer = m.blobs.find((b) => b.size > 1024 * 1024)!.digest;
  const config = await loadConfig(n.config);
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const tracker = new StatusTracker(emptyStatus('node-a'));
  const runtime = runtimeTarget(config, log);
  t.teardown(() => runtime.close());
  const store = async (stalls: number) =>
    new StallingStore(await LayoutStore.open(layout, catalog), layer, stalls);
  return { n, m, config, log, tracker, runtime, store, lines };
}

t.test(
  'a layer that stops mid-blob on every try: cancelled, retried, then PullStalled naming the image; nothing pinned, the mirror gone',
  async (t) => {
    const s = await setUp(t);
    const store = await s.store(Infinity);
    const err = await loadImages(
      { config: s.config, log: s.log, tracker: s.tracker, runtime: s.runtime },
      { manifest: s.m, store, releases: [] },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err, 'the load fails: it does not hang');
    t.equal(reasonOf(err), 'PullStalled', String(err));
    t.match((err as Error).message, /quay\.io\/acme\/big/, 'the message names the image');
    t.notMatch(
      (err as Error).message,
      /acme\/small/,
      'and only that one: the other image was pulled',
    );
    t.match((err as Error).message, /no bytes moved for 2 s \(preload\.stallSeconds\)/);
    t.match((err as Error).message, /\(2 attempts\)/, 'after the retry');
    t.ok(store.reads >= 2, `the layer was asked for again after the cancel (${store.reads} reads)`);
    t.match(
      s.lines.join(''),
      /retrying quay\.io\/acme\/big.*no bytes moved/,
      'the retry is logged',
    );
    const pinned = await s.runtime.pinnedRefs();
    t.same(
      [...pinned].filter((r) => r.includes('quay.io/acme/')),
      [],
      'nothing pinned',
    );
    t.notOk(
      s.tracker.current.conditions.some((c) => c.type === 'Preloaded' && c.status === 'True'),
      'not Preloaded',
    );
    t.match(
      s.tracker.current.conditions.find((c) => c.type === 'Serving'),
      { status: 'False', reason: 'RegistryStopped' },
    );
    t.same(
      await readdir(s.config.paths.containerdCertsDir),
      [],
      'the mirror (hosts.toml) is removed',
    );
  },
);

t.test(
  'a stall on the first try only: the retry pulls it; every image pulled and pinned',
  async (t) => {
    const s = await setUp(t);
    const store = await s.store(1);
    await loadImages(
      { config: s.config, log: s.log, tracker: s.tracker, runtime: s.runtime },
      { manifest: s.m, store, releases: [] },
    );
    t.ok(store.reads >= 2, `stalled once, then read again (${store.reads} reads)`);
    t.match(s.lines.join(''), /retrying quay\.io\/acme\/big/);
    t.match(
      s.tracker.current.conditions.find((c) => c.type === 'Preloaded'),
      { status: 'True', reason: 'AllImagesPulled' },
    );
    const pinned = await s.runtime.pinnedRefs();
    for (const img of s.m.images)
      t.ok(pinned.has(`${img.repository}:${img.tag}`), `${img.repository} pinned`);
  },
);
