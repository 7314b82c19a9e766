// Packet loss between nodes in network namespaces (issue #22), as this kernel allows it (no
// netem): nft `numgen random` drops 5% of what the fetching node receives. node-a has the stick;
// node-b fetches it from node-a after the approval through the loss and still ends Ready,
// loaded and pinned in its own containerd. (A file of its own: with the link-down case it came
// near tap's 300 s on a loaded machine.)
import t from 'tap';
import { dropIncoming, netnsSupport } from '../helpers/netns.js';
import { peerCluster, readyFromPeers, timeMarks } from './peers-nodes-setup.js';

const MiB = 1024 * 1024;
const skip = netnsSupport();

t.test(
  '5% of what a fetching node receives is dropped (nft numgen): it still ends Ready from the stick node',
  { skip },
  async (t) => {
    const mark = timeMarks(t);
    const c = await peerCluster(t, ['node-a', 'node-b'], 4 * MiB);
    const [a, b] = c.nodes as [(typeof c.nodes)[0], (typeof c.nodes)[0]];
    mark('two nodes and the bundle made');
    const dropped = dropIncoming(b.net, 5);
    for (const n of [a, b]) n.start();
    await c.plugStick();
    await a.daemon!.until(
      'node-a Ready from its stick',
      (s) => s?.phase === 'Ready' && !!s?.bundle,
    );
    mark('node-a Ready from its stick');
    await c.approve();
    await readyFromPeers(t, b);
    mark('node-b Ready through the loss');
    t.ok(a.uploaded() > 4 * MiB, `node-a sent node-b the image (${a.uploaded()} bytes)`);
    t.ok(
      dropped() > 0,
      `packets were dropped on the way in (${dropped()}), and the load still completed`,
    );
  },
);
