// The peers bench's rows (issue #42): ours against the registry baseline measured in the same
// run, each ratio ours / baseline, with the targets at 7 nodes and 2 GiB.
import { stats } from './measure.mjs';

const GiB = 2 ** 30;

/**
 * @typedef {{ all: number, transfer: number, sent: number, cpu: number }} Side
 *   all: seconds until every node is Ready (ours) or pulled and pinned (baseline); transfer:
 *   seconds until every node holds every byte; sent: bytes on the stick node's cable; cpu:
 *   CPU seconds of the first receiving node's processes over the same span as `all`
 */

/**
 * @param {{ ours: Side, baseline: Side, bundleBytes: number, payloadBytes: number, what: string }} m
 *   bundleBytes: the bundle file ours moves; payloadBytes: the blobs the baseline pulls
 */
export function peersRows(m) {
  const { ours, baseline: base, what } = m;
  const peerName =
    "docker-registry on the stick node, every node's containerd pulling through CRI and pinning";
  const row = (id, step, unit, o, p, target) => ({
    id,
    step: `peers: ${step} (${what})`,
    unit,
    ours: stats([o]),
    peer: stats([p]),
    ratios: stats([o / p]),
    peerName,
    ...(target ? { target } : {}),
  });
  const perGiB = (side, bytes) => side.cpu / (bytes / GiB);
  return [
    row(
      'peers',
      'approval → every node Ready vs every node pulled and pinned',
      's',
      ours.all,
      base.all,
      { max: 1.0, what: '≤ 1.0' },
    ),
    row(
      'peers-transfer',
      'the transfer alone: every node holds every byte (ours: the verified bundle)',
      's',
      ours.transfer,
      base.transfer,
    ),
    // the target bounds the bytes themselves (report.mjs: a MiB row's largest sample), not the ratio
    row('peers-upload', 'bytes the stick node sent on its cable', 'MiB', ours.sent, base.sent, {
      max: 1.5 * m.bundleBytes,
      what: '≤ 1.5× the bundle',
    }),
    row(
      'peers-cpu',
      'CPU-seconds per GiB received, first receiving node (every process in its namespace: ours the agent and containerd, the baseline containerd)',
      's',
      perGiB(ours, m.bundleBytes),
      perGiB(base, m.payloadBytes),
      { max: 1.2, what: '≤ 1.2' },
    ),
  ];
}
