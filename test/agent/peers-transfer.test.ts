// Fetching an approved bundle from peers (issue #22 item 3): real mutual-TLS servers on
// 127.0.0.x ports with certificates from deploy/openshift/peer-ca.mjs, a bundle staged as a
// stick stages it. The fetched layout must be the stick's byte for byte; lying, dying and
// unreachable peers are survived; what is verified survives a stop.
import t from 'tap';
import { createServer } from 'node:net';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { PeerCounters, ServedBundle, type AgentError } from '@offline-bundle/agent';
import { OCI_LAYOUT_CONTENT, openBundle, readHeader } from '@offline-bundle/format';
import { FixedDirectory, MiB, altered, endpoint, peerWorld, treeOf } from './peers-setup.js';

const w = await peerWorld(t, [6 * MiB, 4 * MiB, 2 * MiB, 1 * MiB]);
let nodes = 0;
/** A fresh node's upgrade directory for each fetch. */
const upgradeDirOf = (w: { b: { dir: string } }, _name: string) =>
  join(w.b.dir, `node-${++nodes}`, 'upgrade');

t.test(
  'two peers: the fetched staging is the stick staging byte for byte, blobs spread over both',
  async (t) => {
    const a = await w.server();
    const b = await w.server();
    const dir = new FixedDirectory(
      [w.approval],
      [endpoint('node-a', a.url), endpoint('node-b', b.url)],
    );
    const up = upgradeDirOf(w, 'n1');
    const { result, counters } = w.fetch(up, dir, { streams: 2 });
    const r = await result;
    t.equal(r.target, join(up, '1.2.3-amd64'));
    t.same(
      await treeOf(r.target),
      await treeOf(w.seed),
      'same files, same bytes as the stick staging (bundle.json and signature included)',
    );
    t.same(await readdir(up), ['1.2.3-amd64'], 'no partial directory, no temp file left');
    t.ok(
      (counters.fetchedFrom.get('node-a') ?? 0) > 0 &&
        (counters.fetchedFrom.get('node-b') ?? 0) > 0,
      `both peers sent blobs: ${JSON.stringify([...counters.fetchedFrom])}`,
    );
    t.equal(
      counters.bytesFetched,
      w.layoutBytes - OCI_LAYOUT_CONTENT.length,
      'every listed byte but oci-layout (written locally) fetched exactly once',
    );
    t.equal(
      a.counters.bytesServed + b.counters.bytesServed,
      counters.bytesFetched,
      'the servers counted what they sent',
    );
    t.equal(counters.suspect.size, 0);
    const again = await w.fetch(up, dir).result;
    t.ok(again.already, 'the same bundle again: found staged, nothing fetched');
  },
);

t.test('a peer serving from its bundle file (media mode) gives the same staging', async (t) => {
  const source = await openBundle(w.b.path);
  t.teardown(() => source.close());
  const offer = await ServedBundle.fromBundleFile(source, await readHeader(source));
  t.ok(offer.complete);
  const media = await w.server({ offer });
  const r = await w.fetch(
    upgradeDirOf(w, 'media'),
    new FixedDirectory([w.approval], [endpoint('media', media.url)]),
  ).result;
  t.same(await treeOf(r.target), await treeOf(w.seed));
});

t.test(
  'a peer that flips a byte is suspect; every blob comes from the honest one; still complete',
  async (t) => {
    const flip = (d: string, data: NodeJS.ReadableStream) =>
      data.pipe(
        new Transform({
          transform(c: Buffer, _e, cb) {
            const x = Buffer.from(c);
            x[0] = x[0]! ^ 0xff;
            cb(null, x);
          },
        }),
      );
    const liar = await w.server({ offer: altered(w.served, (d, data) => flip(d, data) as never) });
    // one more byte than the signed size: refused before it is written
    const long = altered(
      w.served,
      (_d, data) =>
        data.pipe(
          new Transform({
            transform: (c, _e, cb) => cb(null, c),
            flush(cb) {
              cb(null, Buffer.from('!'));
            },
          }),
        ) as never,
    );
    const size = long.size.bind(long);
    const open = long.open.bind(long);
    long.size = (d) => (size(d) === undefined ? undefined : size(d)! + 1);
    long.open = (d, s, e) => open(d, s, Math.min(e, size(d)!));
    const longer = await w.server({ offer: long });
    const honest = await w.server();
    const dir = new FixedDirectory(
      [w.approval],
      [endpoint('liar', liar.url), endpoint('longer', longer.url), endpoint('honest', honest.url)],
    );
    const { result, counters } = w.fetch(upgradeDirOf(w, 'n1'), dir, { streams: 3 });
    const r = await result;
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
    t.same([...counters.suspect].sort(), ['liar', 'longer']);
    t.notOk(
      counters.fetchedFrom.has('liar') || counters.fetchedFrom.has('longer'),
      'no byte of theirs was counted as fetched',
    );
  },
);

t.test(
  'a peer that serves another bundle.json under the approved digest is suspect; another serves the head',
  async (t) => {
    const other = {
      ...w.served,
      manifestDigest: w.served.manifestDigest,
      manifestBytes: Buffer.from(w.served.manifestBytes.toString().replace('1.2.3', '1.2.4')),
    };
    const wrong = await w.server({ offer: altered(other as never, (_d, data) => data) });
    const honest = await w.server();
    const dir = new FixedDirectory(
      [w.approval],
      [endpoint('wrong', wrong.url), endpoint('honest', honest.url)],
    );
    const { result, counters } = w.fetch(upgradeDirOf(w, 'n1'), dir);
    const r = await result;
    t.same(await treeOf(r.target), await treeOf(w.seed));
    t.ok(counters.suspect.has('wrong'));
    const alone = w.fetch(
      upgradeDirOf(w, 'alone'),
      new FixedDirectory([w.approval], [endpoint('wrong', wrong.url)]),
    );
    const err = await alone.result.catch((e: AgentError) => e);
    t.equal((err as AgentError).reason, 'PeersSuspect', (err as Error).message);
  },
);

t.test(
  'a peer killed mid-blob: the blob goes on with Range from the other; a silent peer is dropped after the connect timeout',
  async (t) => {
    // accepts TCP, never answers TLS: only the connect timeout gets rid of it
    const silent = createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    t.teardown(() => silent.close());
    let killer: { close(): Promise<void> } | undefined;
    let sent = 0;
    const dying = await w.server({
      offer: altered(
        w.served,
        (_d, data) =>
          data.pipe(
            new Transform({
              transform(c: Buffer, _e, cb) {
                sent += c.length;
                // after 2 MiB of blob bytes the node dies: its sockets are cut mid-response
                if (sent > 2 * MiB) {
                  void killer!.close();
                  return cb(new Error('killed'));
                }
                cb(null, c);
              },
            }),
          ) as never,
      ),
    });
    killer = dying;
    const survivor = await w.server();
    const silentUrl = `https://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const dir = new FixedDirectory(
      [w.approval],
      [
        endpoint('silent', silentUrl),
        endpoint('dying', dying.url),
        endpoint('survivor', survivor.url),
      ],
    );
    const counters = new PeerCounters();
    const started = Date.now();
    const r = await w.fetch(upgradeDirOf(w, 'n1'), dir, {
      streams: 3,
      counters,
      connectTimeoutMs: 1500,
    }).result;
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
    const fromDying = counters.fetchedFrom.get('dying') ?? 0;
    t.ok(fromDying > 0, `bytes the dying peer sent before it died were kept (${fromDying})`);
    t.equal(
      counters.bytesFetched,
      w.layoutBytes - OCI_LAYOUT_CONTENT.length,
      'no byte fetched twice: the rest came by Range',
    );
    t.equal(
      survivor.counters.bytesServed,
      w.layoutBytes - OCI_LAYOUT_CONTENT.length - fromDying,
      'the survivor sent only what the dying peer had not',
    );
    t.notOk(counters.fetchedFrom.has('silent'));
    t.ok(Date.now() - started < 20_000, 'the silent peer did not hold the fetch for a TCP timeout');
  },
);

t.test(
  'stopped mid-fetch: verified blobs stay (no temp file), the next fetch keeps them and fetches the rest',
  async (t) => {
    const slow = await w.server({ uploadBytesPerSecond: 4 * MiB });
    const dir = new FixedDirectory([w.approval], [endpoint('slow', slow.url)]);
    const up = upgradeDirOf(w, 'stopped');
    const stop = new AbortController();
    let placedBytes = 0;
    const first = w.fetch(up, dir, {
      signal: stop.signal,
      streams: 1,
      onVerified: (e) => {
        placedBytes += e.size;
        if (placedBytes > 3 * MiB) stop.abort();
      },
    });
    const err = await first.result.catch((e: AgentError) => e);
    t.equal((err as AgentError).reason, 'Interrupted', (err as Error).message);
    const partial = join(up, '1.2.3-amd64.partial');
    const files = Object.keys(await treeOf(partial));
    t.notOk(
      files.some((f) => f.endsWith('.writing')),
      `no temp file: ${files.join(', ')}`,
    );
    t.ok(
      files.includes('resume.json'),
      'the resume marker names the bundle, as a stick staging does',
    );
    // "after an agent restart": a new fetch in the same directories
    const second = await w.fetch(up, dir).result;
    t.ok(
      second.keptBytes >= placedBytes - OCI_LAYOUT_CONTENT.length && placedBytes < w.layoutBytes,
      `kept ${second.keptBytes} bytes of ${w.layoutBytes}`,
    );
    t.same(await treeOf(second.target), await treeOf(w.seed));
  },
);

t.test('no peer holds it: NoPeerHasBundle, one line, nothing written', async (t) => {
  const up = upgradeDirOf(w, 'none');
  const none = await w
    .fetch(up, new FixedDirectory([w.approval], []))
    .result.catch((e: AgentError) => e);
  t.equal((none as AgentError).reason, 'NoPeerHasBundle');
  t.notMatch((none as Error).message, /\n/);
  const other = await w.server({ bundle: () => undefined });
  const r = await w
    .fetch(
      up,
      new FixedDirectory(
        [w.approval],
        [
          endpoint('other', other.url),
          endpoint('gone', 'https://127.0.0.1:1'),
          endpoint('plain', 'http://127.0.0.1:2'),
          endpoint('junk', 'https://[not an address'),
        ],
      ),
    )
    .result.catch((e: AgentError) => e);
  t.equal((r as AgentError).reason, 'NoPeerHasBundle', (r as Error).message);
  t.match((r as Error).message, /other/);
  await t.rejects(readdir(up), { code: 'ENOENT' }, 'nothing written');
});
