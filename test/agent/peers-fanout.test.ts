// Fan-out between nodes that fetch at the same time (issue #22: the stick node must upload
// about the bundle once, not once per node): each fetching node serves what it verified and
// is found as a peer while it still fetches (a directory that says what each node publishes,
// as status.serving does), each starts at another place in the blob list, and each looks at
// its peers again while blobs flow. Real mutual-TLS servers on 127.0.0.x, the seed's upload
// capped so that the transfers overlap as they do on a real link.
import t from 'tap';
import {
  ServedBundle,
  type PeerEndpoint,
  type PeerDirectory,
  type PeerOffer,
  type RunningPeerServer,
} from '@offline-bundle/agent';
import { OCI_LAYOUT_CONTENT } from '@offline-bundle/format';
import { MiB, endpoint, peerWorld, treeOf } from './peers-setup.js';
import { join } from 'node:path';

const w = await peerWorld(
  t,
  Array.from({ length: 12 }, (_, i) => 384 * 1024 + i * 4096),
);
const fetched = w.layoutBytes - OCI_LAYOUT_CONTENT.length;

/** What the cluster says: the seed, complete, and every fetching node that publishes an offer, with its count of verified blobs. */
class LiveDirectory {
  readonly published = new Map<string, { url: string; offer: () => PeerOffer | undefined }>();
  constructor(private readonly seed: PeerEndpoint) {}
  for(self: string): PeerDirectory {
    return {
      approved: async () => [w.approval],
      peersFor: async () => [
        this.seed,
        ...[...this.published].flatMap(([node, p]) => {
          const offer = p.offer();
          return node === self || !offer
            ? []
            : [
                {
                  node,
                  url: p.url,
                  complete: offer.complete,
                  verifiedBlobs: offer.verifiedDigests(1e6).length,
                },
              ];
        }),
      ],
    };
  }
}

/** A node that fetches and serves what it verified, as the daemon's PeerService does. */
async function fetchingNode(name: string, live: LiveDirectory, start: number) {
  let offer: ServedBundle | undefined;
  const server = await w.server({
    bundle: (d) => (d === w.approval.manifestDigest ? offer : undefined),
  });
  live.published.set(name, { url: server.url, offer: () => offer });
  let i = 0;
  const run = () =>
    w.fetch(join(w.b.dir, name, 'upgrade'), live.for(name), {
      streams: 3,
      peerRefreshMs: 200,
      // where it starts in the blob list; then Math.random's picks among holders
      random: () => (i++ === 0 ? start : Math.random()),
      onStaging: (head, partial, target) => {
        offer = ServedBundle.staging(partial, target, head);
      },
      onVerified: (e) => offer?.verified(e.digest),
    });
  return { name, server, run };
}

const servedBy = (s: RunningPeerServer) => s.counters.bytesServed;

t.test(
  'two nodes fetch at the same time from one seed: they take blobs from each other, the seed sends well under 2x the bundle',
  async (t) => {
    const seed = await w.server({ uploadBytesPerSecond: 2 * MiB });
    const live = new LiveDirectory(endpoint('seed', seed.url));
    const b = await fetchingNode('node-b', live, 0);
    const c = await fetchingNode('node-c', live, 0.5);
    const [fb, fc] = [b.run(), c.run()];
    const [rb, rc] = await Promise.all([fb.result, fc.result]);
    t.same(await treeOf(rb.target), await treeOf(w.seed), 'node-b has the bundle byte for byte');
    t.same(await treeOf(rc.target), await treeOf(w.seed), 'node-c too');
    const ratio = servedBy(seed) / fetched;
    t.comment(
      `seed sent ${ratio.toFixed(2)}x the bundle; node-b sent ${servedBy(b.server)}, node-c ${servedBy(c.server)} bytes`,
    );
    t.ok(
      ratio < 1.5,
      `the seed sent ${ratio.toFixed(2)}x the bundle (each node on its own from the seed: 2x)`,
    );
    t.ok(
      (fb.counters.fetchedFrom.get('node-c') ?? 0) > 0,
      `node-b got blobs from node-c: ${JSON.stringify([...fb.counters.fetchedFrom])}`,
    );
    t.ok(
      (fc.counters.fetchedFrom.get('node-b') ?? 0) > 0,
      `node-c got blobs from node-b: ${JSON.stringify([...fc.counters.fetchedFrom])}`,
    );
    t.equal(
      servedBy(seed) + servedBy(b.server) + servedBy(c.server),
      2 * fetched,
      'every byte sent once to each node, none twice',
    );
    t.same([...fb.counters.suspect, ...fc.counters.suspect], [], 'no peer suspect');
  },
);

t.test(
  'a partial peer answers 404 for a blob it does not hold: the fetch takes it elsewhere, the peer is not suspect and still sends what it holds',
  async (t) => {
    const seed = await w.server({ uploadBytesPerSecond: 8 * MiB });
    const blobs = w.manifest.blobs.map((b) => b.digest);
    const lacking = new Set(blobs.filter((_, i) => i % 2 === 0));
    const events: string[] = [];
    // a node still fetching whose listing is a step behind: it names blobs it does not hold (yet)
    const partial: PeerOffer = {
      manifestDigest: w.served.manifestDigest,
      manifestBytes: w.served.manifestBytes,
      signature: w.served.signature,
      complete: false,
      verifiedDigests: (n) => w.served.verifiedDigests(n),
      size: (d) => {
        if (!lacking.has(d)) return w.served.size(d);
        events.push('404');
        return undefined;
      },
      open: async (d, s, e) => {
        events.push('sent');
        return w.served.open(d, s, e);
      },
    };
    const p = await w.server({ offer: partial });
    const dir = {
      approved: async () => [w.approval],
      peersFor: async () => [endpoint('seed', seed.url), endpoint('node-p', p.url, false)],
    };
    const { result, counters } = w.fetch(join(w.b.dir, 'after-404', 'upgrade'), dir, {
      // one blob at a time, node-p asked first for each (the last holder at the top of the weighted draw)
      streams: 1,
      peerRefreshMs: 200,
      random: () => 0.99,
    });
    const r = await result;
    t.same(await treeOf(r.target), await treeOf(w.seed), 'the bundle, byte for byte');
    t.ok(events.includes('404'), `node-p was asked for a blob it lacks: ${events.join(' ')}`);
    t.ok(
      events.lastIndexOf('sent') > events.indexOf('404'),
      'node-p sent blobs after its first 404 (a 404 is about one blob, not the peer)',
    );
    t.same([...counters.suspect], [], 'node-p is not suspect');
    t.ok((counters.fetchedFrom.get('node-p') ?? 0) > 0, 'node-p sent what it holds');
    const lackingBytes = w.manifest.blobs
      .filter((b) => lacking.has(b.digest))
      .reduce((n, b) => n + b.size, 0);
    t.ok(
      (counters.fetchedFrom.get('seed') ?? 0) >= lackingBytes,
      'what node-p lacks came from the seed',
    );
  },
);
