// A link going down between nodes in network namespaces (issue #22), as this kernel allows it
// (no netem): tc tbf slows node-c's link so its transfer is seen under way, then `ip link set
// down` pulls the cable of the node serving it. node-a has the stick, node-b fetched it from
// node-a after the approval; node-c still ends Ready from the other one, loaded and pinned in
// its own containerd. (Packet loss: peers-nodes-loss.test.ts.)
import t from 'tap';
import { limitLink, netnsSupport, setLink } from '../helpers/netns.js';
import { peerCluster, readyFromPeers, timeMarks } from './peers-nodes-setup.js';
import { until } from '../helpers/until.js';

const MiB = 1024 * 1024;
const skip = netnsSupport();

t.test(
  "a link cut mid-transfer between nodes in namespaces: the serving node's link goes down, the fetching node still ends Ready from the other",
  { skip },
  async (t) => {
    const mark = timeMarks(t);
    const c = await peerCluster(t, ['node-a', 'node-b', 'node-c'], 4 * MiB);
    mark('three nodes and the bundle made');
    const [a, b, cc] = c.nodes as [(typeof c.nodes)[0], (typeof c.nodes)[0], (typeof c.nodes)[0]];
    for (const n of [a, b]) n.start();
    await c.plugStick();
    await a.daemon!.until(
      'node-a Ready from its stick',
      (s) => s?.phase === 'Ready' && !!s?.bundle,
    );
    mark('node-a Ready from its stick');
    await c.approve();
    await readyFromPeers(t, b);
    mark('node-b Ready from node-a');

    await t.test('the link of the node serving it goes down mid-transfer', async (t) => {
      // 8 Mbit/s: the image takes seconds to cross, long enough to cut it half-way
      limitLink(cc.net, '8mbit');
      const sent = () => ({ a: a.uploaded(), b: b.uploaded() });
      const start = sent();
      cc.start();
      const serving = await until(
        'node-c receives its first MiB',
        () => {
          const now = sent();
          const da = now.a - start.a;
          const db = now.b - start.b;
          return da + db > MiB ? (da >= db ? a : b) : undefined;
        },
        { timeoutMs: 90_000, stepMs: 200 },
      ); // sent() runs nft in two namespaces
      const other = serving === a ? b : a;
      t.ok((await cc.status())?.phase !== 'Ready', 'node-c is not done when the link goes down');
      setLink(serving.net, 'down');
      t.teardown(() => setLink(serving.net, 'up'));
      const otherBefore = other.uploaded();
      await readyFromPeers(t, cc);
      t.ok(
        other.uploaded() > otherBefore,
        `the rest came from ${other.name} while ${serving.name}'s link was down`,
      );
      setLink(serving.net, 'up');
    });
  },
);
