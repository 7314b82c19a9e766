// One stick, four nodes (issue #22, "Done when"): each node a network namespace on a bridge with
// its own bundle-agent daemon, root and real containerd, and its own identity against the
// RBAC-enforcing API stand-in (peers-nodes-setup.ts). node-a gets the stick; nobody types
// anything on the other nodes; they fetch nothing until the admin runs `bundle cluster approve`,
// then all end Ready with the image loaded and pinned in their own containerd. node-d joins
// after the stick node left the network, so what it loads came from nodes that fetched it
// themselves (fan-out), as the bytes their peer ports sent show.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { setLink, netnsSupport } from '../helpers/netns.js';
import { PEER_PORT, peerCluster, readyFromPeers, timeMarks } from './peers-nodes-setup.js';
import { until } from '../helpers/until.js';

const MiB = 1024 * 1024;
const skip = netnsSupport();

t.test(
  'four nodes in network namespaces: one stick, the others fetch from each other only after `bundle cluster approve`, all end Ready and pinned',
  { skip },
  async (t) => {
    const mark = timeMarks(t);
    const c = await peerCluster(t, ['node-a', 'node-b', 'node-c', 'node-d'], 4 * MiB);
    mark('four nodes and the bundle made');
    const [a, b, cc, d] = c.nodes as [
      (typeof c.nodes)[0],
      (typeof c.nodes)[0],
      (typeof c.nodes)[0],
      (typeof c.nodes)[0],
    ];
    for (const n of [a, b, cc]) n.start();
    await c.plugStick();
    await a.daemon!.until(
      'node-a Ready from its stick',
      (s) => s?.phase === 'Ready' && !!s?.bundle,
    );
    mark('node-a Ready from its stick');

    // longer than the daemons' approval poll (5 s): without an approval nobody asks node-a for anything
    await sleep(7000);
    for (const n of [b, cc]) {
      t.notOk((await n.status())?.bundle, `${n.name} has no bundle before the approval`);
      t.same(
        n.images().filter((l) => l.includes('acme')),
        [],
        `${n.name}'s containerd has no image of it`,
      );
    }
    t.equal(a.uploaded(), 0, "node-a's peer port sent no byte before the approval");
    t.notOk(
      c.api.get('nodebundlestatuses', 'node-a')?.status?.serving,
      'node-a publishes nothing as served before the approval (issue #42: inert until approved)',
    );

    const approved = JSON.parse(await c.approve());
    t.match(JSON.stringify(approved), c.manifestDigest, "the approval names the bundle's digest");
    const serving = await until(
      'node-a publishes what it serves',
      () => c.api.get('nodebundlestatuses', 'node-a')?.status?.serving,
      { timeoutMs: 90_000 },
    );
    t.match(
      serving,
      { manifestDigest: c.manifestDigest, complete: true, address: a.net.address, port: PEER_PORT },
      'node-a serves the bundle on its bridge address',
    );
    for (const n of [b, cc]) await readyFromPeers(t, n);
    mark('node-b and node-c Ready from peers');
    t.ok(
      a.uploaded() > 4 * MiB,
      `node-a uploaded the image's bytes (${a.uploaded()} bytes sent from its peer port)`,
    );

    // the stick node leaves the network; node-d starts only now and must be fed by node-b and node-c
    setLink(a.net, 'down');
    // teardowns run last-registered first: the link back and the four daemons stopped at once, before
    // their containerds; cut off, node-a's daemon waited out an API call's deadline at SIGTERM
    t.teardown(async () => {
      setLink(a.net, 'up');
      await Promise.all(c.nodes.map((n) => n.daemon?.stop()));
    });
    const before = b.uploaded() + cc.uploaded();
    d.start();
    const s = await readyFromPeers(t, d);
    mark('node-d Ready from peers');
    t.equal(
      s.bundle?.manifestDigest ?? c.manifestDigest,
      c.manifestDigest,
      'node-d loaded the approved bundle',
    );
    const fromOthers = b.uploaded() + cc.uploaded() - before;
    t.ok(
      fromOthers > 4 * MiB,
      `node-b and node-c (not the stick node) served node-d ${fromOthers} bytes`,
    );
    t.match(d.daemon!.out.log, /fetching it from other nodes/);
  },
);
