// tier: unit
// What people see of bundles between nodes (issue #22, item 5): the technician's line at the
// stick node (may the stick go? how many other nodes hold a whole copy), the line of a node
// fetching from peers, status.peers in the cluster resource (bounded, valid for the CRD), the
// /metrics families, and `bundle cluster status`'s source and rate per node.
import t from 'tap';
import {
  Metrics,
  emptyStatus,
  LIMITS,
  technicianLine,
  toResource,
  SPOOLED_MEDIA,
  DROP_DIRECTORY_MEDIA,
  type NodeStatus,
  type PeersStatus,
} from '@offline-bundle/status';
import { rollup } from '@offline-bundle/cluster';
import { compileSchema, crdSchema, loadCrd } from './lib.js';

const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
const transfer = { bytesServed: 0, bytesFetched: 0, fetchedFrom: [], suspect: [] };

function readyFromStick(peers?: Partial<PeersStatus>, media = 'USB stick UPDATE'): NodeStatus {
  return {
    ...emptyStatus('n1'),
    phase: 'Ready',
    bundle: { file: '/media/u.bundle', version: '1.2.3', media, mode: 'staged' },
    conditions: [
      {
        type: 'Ready',
        status: 'True',
        reason: 'Loaded',
        message: 'x',
        lastTransitionTime: new Date().toISOString(),
      },
    ],
    ...(peers ? { peers: { up: true, transfer, ...peers } } : {}),
  };
}

t.test(
  "the stick node, Ready: the line says whether the stick may go, from the other nodes' complete copies",
  async (t) => {
    const done = 'Done: update 1.2.3 is loaded on this node.';
    t.equal(
      technicianLine(readyFromStick()),
      `${done} You may remove the USB stick.`,
      'peers off: as before',
    );
    t.equal(
      technicianLine(readyFromStick({ copies: { version: '1.2.3', nodes: 3, serving: true } })),
      `${done} You may remove the USB stick: 3 other nodes have a complete copy.`,
    );
    t.equal(
      technicianLine(readyFromStick({ copies: { version: '1.2.3', nodes: 1, serving: true } })),
      `${done} You may remove the USB stick: 1 other node has a complete copy.`,
    );
    const none = technicianLine(
      readyFromStick({ copies: { version: '1.2.3', nodes: 0, serving: true } }),
    );
    t.match(
      none,
      /^Done: update 1\.2\.3 is loaded on this node\. Keep the USB stick in until another node has a copy/,
    );
    t.notMatch(none, /You may remove/, 'no other copy yet: the stick is not let go');
    t.match(
      technicianLine(readyFromStick({ copies: { version: '1.2.3', nodes: 0, serving: false } })),
      /the other nodes need the stick too\.$/,
      'not serving, no other copy: honest that the others need the stick',
    );
    const stale = technicianLine(
      readyFromStick({ copies: { version: '1.2.2', nodes: 5, serving: true } }),
    );
    t.notMatch(
      stale,
      /5 other nodes|You may remove/,
      "a count for the previous bundle is not this one's",
    );
    t.match(stale, /Checking which other nodes have a copy/);
    t.match(
      technicianLine(
        readyFromStick(
          { copies: { version: '1.2.3', nodes: 2, serving: true } },
          `${SPOOLED_MEDIA} (3 parts)`,
        ),
      ),
      /You may remove the USB stick: 2 other nodes/,
      'parts from sticks: the same words',
    );
    t.notMatch(
      technicianLine(
        readyFromStick(
          { copies: { version: '1.2.3', nodes: 0, serving: true } },
          `${DROP_DIRECTORY_MEDIA}/var/drop`,
        ),
      ),
      /Keep the USB stick/,
      'a dropped file: no stick to keep',
    );
  },
);

t.test(
  'a node fetching from peers: its own line, never about a stick it does not have',
  async (t) => {
    const s: NodeStatus = {
      ...emptyStatus('n2'),
      phase: 'Staging',
      bundle: { file: '/var/upgrade/1.2.3-amd64', version: '1.2.3', media: 'peers' },
      progress: {
        bytesDone: 512 * 1024 * 1024,
        bytesTotal: 2 * 1024 * 1024 * 1024,
        imagesDone: 0,
        imagesTotal: 0,
        etaSeconds: 90,
      },
    };
    const line = technicianLine(s);
    t.match(line, /^Fetching the update 1\.2\.3 from other nodes \(536\.9 MB of 2\.1 GB/);
    t.notMatch(line, /USB stick/);
    const ready = technicianLine({ ...s, phase: 'Ready', conditions: [] });
    t.match(
      ready,
      /^Done: update 1\.2\.3 is loaded on this node\. It was fetched from other nodes: no USB stick is needed\.$/,
    );
    t.notMatch(
      technicianLine({
        ...s,
        phase: 'Preloading',
        progress: { ...s.progress, imagesDone: 1, imagesTotal: 4 },
      }),
      /USB stick/,
    );
    const killed = technicianLine({
      ...s,
      phase: 'Failed',
      conditions: [
        {
          type: 'Failed',
          status: 'True',
          reason: 'Interrupted',
          message: 'x',
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    });
    t.notMatch(killed, /USB stick/, 'a fetch cut by a stop: no stick to plug in again');
    t.match(killed, /goes on by itself/);
  },
);

t.test('status.peers in the cluster resource: bounded and valid for the CRD', async (t) => {
  const many = Array.from({ length: 40 }, (_, i) => ({ node: `w${i}`, bytes: i * 1000 }));
  const s = readyFromStick({
    up: false,
    problem: { reason: 'PeerPortInUse', message: 'port 9470 is taken'.repeat(200) },
    transfer: {
      bytesServed: 7,
      bytesFetched: 9,
      fetchedFrom: [{ node: 'Bad_Name', bytes: 1e12 }, ...many],
      suspect: ['w3', 'w3', 'Bad_Name'],
    },
    copies: { version: '1.2.3', nodes: 2, serving: true },
  });
  const o = toResource(s, 'n1');
  t.ok(validate(o), JSON.stringify(validate.errors));
  const p = o.status.peers!;
  t.equal(p.up, false);
  t.equal(p.transfer.fetchedFrom.length, LIMITS.peerNodes, 'fetchedFrom capped');
  t.equal(p.transfer.fetchedFrom[0]!.node, 'w39', 'the largest senders kept first');
  t.notOk(
    p.transfer.fetchedFrom.some((f) => f.node === 'Bad_Name'),
    'not a node name: dropped',
  );
  t.same(p.transfer.suspect, ['w3']);
  t.ok(p.problem!.message.length <= LIMITS.peerProblem);
  t.same(p.copies, { version: '1.2.3', nodes: 2, serving: true });
});

t.test('/metrics: bytes served, fetched by peer, suspect peers, copies, server up', async (t) => {
  const m = new Metrics(() => 0);
  m.observe(
    readyFromStick({
      transfer: {
        bytesServed: 4096,
        bytesFetched: 300,
        fetchedFrom: [
          { node: 'w2', bytes: 200 },
          { node: 'w3', bytes: 100 },
        ],
        suspect: ['w9'],
      },
      copies: { version: '1.2.3', nodes: 2, serving: true },
    }),
  );
  const text = await m.render();
  t.match(text, /^bundle_agent_peer_up 1$/m);
  t.match(text, /^bundle_agent_peer_bytes_served_total 4096$/m);
  t.match(text, /^bundle_agent_peer_bytes_fetched_total\{peer="w2"\} 200$/m);
  t.match(text, /^bundle_agent_peer_bytes_fetched_total\{peer="w3"\} 100$/m);
  t.match(text, /^bundle_agent_peer_suspect\{peer="w9"\} 1$/m);
  t.match(text, /^bundle_agent_peer_copies\{version="1\.2\.3"\} 2$/m);
  const off = new Metrics(() => 0);
  off.observe(readyFromStick());
  t.notMatch(await off.render(), /bundle_agent_peer_/, 'peers off: no peer families');
});

t.test(
  "bundle cluster status: the source of each node's bundle, and the rate while it fetches",
  async (t) => {
    const node = (name: string) => ({
      metadata: { name },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const st = (name: string, status: Record<string, unknown>) => ({ metadata: { name }, status });
    const r = rollup(['a', 'b', 'c', 'd', 'e'].map(node), [
      st('a', { phase: 'Ready', bundle: { media: 'USB stick X' }, progress: { rate: 50 } }),
      st('b', {
        phase: 'Staging',
        updatedAt: new Date().toISOString(),
        bundle: { media: 'peers' },
        progress: { bytesDone: 10, bytesTotal: 100, rate: 1_000_000 },
      }),
      st('c', { phase: 'Ready', bundle: { media: 'peers', fromPeers: ['a', 'b'] } }),
      st('d', { phase: 'Ready', bundle: { media: `${SPOOLED_MEDIA} (2 parts)` } }),
      st('e', { phase: 'Ready', bundle: { media: 'file' } }),
    ]);
    const by = Object.fromEntries(r.rows.map((x) => [x.node, x]));
    t.same(
      [by.a!.source, by.b!.source, by.c!.source, by.d!.source, by.e!.source],
      ['stick', 'peers', 'peer a,b', 'spool', 'file'],
    );
    t.same(
      [by.b!.rate, by.b!.bytesDone, by.b!.bytesTotal],
      [1_000_000, 10, 100],
      'fetching: its rate and bytes',
    );
    t.equal(by.a!.rate, undefined, 'Ready: a rate of a step long done is not shown');
  },
);
