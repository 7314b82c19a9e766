// Our side of the peers bench: from `bundle cluster approve` until every receiving node is
// Ready, counted as the baseline is (bench/lib/peers-baseline.mjs): the transfer alone (a node
// holds the verified bundle once its load put the fetched layout in place), the bytes
// the stick node sent on its cable and the CPU time of the first receiving node.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { until } from '../../test/helpers/until.js';
import { nodeCpu, sentOnCable } from './netns-meter.mjs';

/** Between looks at the nodes' status files (the transfer's end is seen this close). */
const POLL_MS = 250;
/** Bound against a hang, not a figure: a full-size run on this machine took ~5 min. */
const RUN_TIMEOUT_MS = 3_600_000;

/** The node holds the bundle whole and verified from peers: its load put the fetched staging in place (UPGRADE/<version>-<arch>/bundle.json, written last). */
function holdsFetched(root) {
  const dir = join(root, 'var/lib/upgrade');
  return (
    existsSync(dir) &&
    readdirSync(dir).some((f) => !f.endsWith('.partial') && existsSync(join(dir, f, 'bundle.json')))
  );
}

/**
 * Approves and waits for every node of `nodes` to be Ready.
 * @param {{ approve: () => Promise<unknown>, seed: { net: { hostVeth: string } },
 *   nodes: { name: string, root: string, net: { ns: string }, status: () => Promise<any> }[] }} o
 */
export async function oursFromApproval(o) {
  const cpu = nodeCpu(o.nodes[0].net.ns);
  const sent0 = sentOnCable(o.seed.net.hostVeth);
  const t0 = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - t0) / 1e9;
  await o.approve();
  const readyAt = new Map();
  const transferAt = new Map();
  await until(
    'every node is Ready',
    async () => {
      for (const n of o.nodes) {
        if (readyAt.has(n.name)) continue;
        const s = await n.status();
        if (s?.phase === 'Failed')
          throw new Error(`${n.name} failed: ${JSON.stringify(s.conditions ?? s).slice(0, 500)}`);
        const ready = s?.phase === 'Ready' && !!s?.bundle;
        if (!transferAt.has(n.name) && (ready || holdsFetched(n.root)))
          transferAt.set(n.name, since());
        if (ready) readyAt.set(n.name, since());
      }
      return readyAt.size === o.nodes.length;
    },
    { timeoutMs: RUN_TIMEOUT_MS, stepMs: POLL_MS },
  );
  const all = Math.max(...readyAt.values());
  return {
    all,
    first: Math.min(...readyAt.values()),
    transfer: Math.max(...transferAt.values()),
    sent: sentOnCable(o.seed.net.hostVeth) - sent0,
    cpu: cpu(),
  };
}
