// tier: unit
// The peers bench's arithmetic (issue #42): each row ours / the registry baseline of the same
// run, CPU per GiB of what each side moved, the targets of the issue; the CPU times read from
// /proc's stat lines; and the baseline's images found in the layout bundle create read.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { peersRows } from '../../bench/lib/peers-rows.mjs';
import { statSeconds } from '../../bench/lib/netns-meter.mjs';
import { layoutImages } from '../../bench/lib/peers-baseline.mjs';
import { verdict } from '../../bench/lib/report.mjs';
import { tmpdir } from '../helpers/tmp.mjs';

const GiB = 2 ** 30;
type Row = { id: string; step: string; peerName: string; target?: unknown };

t.test(
  "every row is ours against the baseline of the same run, with the issue's targets",
  async (t) => {
    const rows = peersRows({
      ours: { all: 30, transfer: 20, sent: 3 * GiB, cpu: 12 },
      baseline: { all: 40, transfer: 10, sent: 14 * GiB, cpu: 8 },
      bundleBytes: 2 * GiB,
      payloadBytes: 1.6 * GiB,
      what: '7 nodes',
    });
    t.same(
      rows.map((r: Row) => r.id),
      ['peers', 'peers-transfer', 'peers-upload', 'peers-cpu'],
    );
    const by = Object.fromEntries(rows.map((r: Row) => [r.id, r]));
    t.equal(by.peers.ratios.median, 0.75, 'all Ready over all pulled and pinned');
    t.equal(verdict(by.peers), 'met', '≤ 1.0 is met at 0.75');
    t.equal(by['peers-transfer'].ratios.median, 2, 'transfer over transfer');
    t.equal(by['peers-upload'].ratios.median, 3 / 14, 'bytes sent over bytes sent');
    t.equal(verdict(by['peers-upload']), 'met', '3 GiB sent is within 1.5× a 2 GiB bundle');
    t.equal(by['peers-cpu'].ours.median, 6, 'ours: CPU seconds per GiB of the bundle');
    t.equal(by['peers-cpu'].peer.median, 5, 'the baseline: per GiB of the blobs it pulled');
    t.equal(by['peers-cpu'].ratios.median, 1.2, 'their ratio');
    t.equal(verdict(by['peers-cpu']), 'met', '1.2 is within ≤ 1.2');
    t.ok(
      rows.every((r: Row) => r.step.includes('(7 nodes)') && /docker-registry/.test(r.peerName)),
      'each row names the run and the baseline',
    );

    const over = peersRows({
      ours: { all: 50, transfer: 20, sent: 3.5 * GiB, cpu: 20 },
      baseline: { all: 40, transfer: 10, sent: 14 * GiB, cpu: 8 },
      bundleBytes: 2 * GiB,
      payloadBytes: 2 * GiB,
      what: 'x',
    });
    t.same(
      over.filter((r: Row) => r.target).map((r: Row) => verdict(r)),
      ['missed', 'missed', 'missed'],
      'slower, more than 1.5× the bundle sent and 2.5× the CPU: all three missed',
    );
  },
);

t.test(
  "CPU seconds from a /proc stat line: own and waited-for children's, whatever the command name holds",
  async (t) => {
    // fields 14-17 (utime stime cutime cstime) in clock ticks; a name with ") " and spaces must not shift them
    const line =
      '4242 (odd) name (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 300 100 20 0 8 0 12345 1000 200';
    t.equal(statSeconds(line), (150 + 50 + 300 + 100) / 100);
  },
);

t.test(
  "the baseline pushes the bundle's own images: matched to the layout's tags by digest",
  async (t) => {
    const dir = await tmpdir(t, 'ob-peers-rows-');
    const layout = join(dir, 'layout');
    await mkdir(layout);
    const ref = (tag: string, digest: string) => ({
      digest,
      annotations: { 'org.opencontainers.image.ref.name': tag },
    });
    await writeFile(
      join(layout, 'index.json'),
      JSON.stringify({ manifests: [ref('img0', 'sha256:aa'), ref('img1', 'sha256:bb')] }),
    );
    const images = await layoutImages(layout, [
      { repository: 'quay.io/acme/app-1', tag: '1.1', digest: 'sha256:bb' },
      { repository: 'quay.io/acme/app', tag: '1.1', digest: 'sha256:aa' },
    ]);
    t.same(images, [
      { tag: 'img1', ref: 'quay.io/acme/app-1:1.1', repo: 'acme/app-1:1.1' },
      { tag: 'img0', ref: 'quay.io/acme/app:1.1', repo: 'acme/app:1.1' },
    ]);
    await t.rejects(
      layoutImages(layout, [{ repository: 'quay.io/acme/other', tag: '1.1', digest: 'sha256:cc' }]),
      /quay\.io\/acme\/other .* is not tagged in .*layout bundle create read/,
      'an image the layout lacks is named',
    );
  },
);
