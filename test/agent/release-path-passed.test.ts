// tier: unit
// One rule for whether a node went past a release of an update path (#43): what stays pinned
// (heldForPath) and what is not brought back when it vanishes (passedOnPath) never disagree,
// and a load leaves out the images only such a release carries (withoutPassedReleases).
import t from 'tap';
import type { BundleManifest } from '@offline-bundle/format';
import {
  heldForPath,
  passedOnPath,
  type ReleaseRecord,
} from '../../agent/dist/state/release-records.js';
import { withoutPassedReleases } from '../../agent/dist/load/load-images.js';

const PATH = ['4.15.40', '4.16.2'];
const record = (version: string): ReleaseRecord => ({
  version,
  arch: 'amd64',
  refs: [],
  loadedAt: '2026-12-07T00:00:00.000Z',
  identity: 'sha256:x',
  path: PATH,
});
const r15 = record('4.15.40');
const records = [r15, record('4.16.2')];

t.test(
  'held for the path exactly while not passed, a node between the hops included',
  async (t) => {
    const rows: [string[], boolean][] = [
      [[], true],
      [['4.14.30'], true],
      [['4.15.40'], true],
      [['4.15.45'], false],
      [['4.16.2'], false],
      [['4.17.0'], false],
    ];
    for (const [running, held] of rows) {
      t.equal(
        heldForPath(r15, records, running),
        held,
        `running ${running.join(', ') || 'unknown'}: ${held ? 'held' : 'not held'}`,
      );
      t.equal(
        passedOnPath(r15, running),
        !held,
        `running ${running.join(', ') || 'unknown'}: ${held ? 'not passed' : 'passed'}, the same answer`,
      );
    }
  },
);

const d = (c: string) => `sha256:${c.repeat(64)}`;
const image = (digest: string) => ({ repository: 'quay.io/ocp/x', tag: null, digest, size: 1 });
/** 4.15.40 → 4.16.2: each release image, its cvo, an etcd both share, and an add-on neither payload lists. */
function pathBundle(payloads: boolean): BundleManifest {
  const hop = (version: string, digest: string, payload: string[]) => ({
    name: version,
    version,
    arch: 'amd64',
    digest,
    upgradeFrom: [],
    ...(payloads ? { payload } : {}),
  });
  return {
    release: {
      ...hop('4.16.2', d('6'), [d('6'), d('c'), d('e')]),
      via: [hop('4.15.40', d('5'), [d('5'), d('b'), d('e')])],
    },
    images: [d('5'), d('b'), d('e'), d('6'), d('c'), d('a')].map(image),
  } as unknown as BundleManifest;
}
const digests = (m: BundleManifest) => m.images.map((i) => i.digest);

t.test('a load leaves out what only a release the node went past carries', async (t) => {
  t.same(
    digests(withoutPassedReleases(pathBundle(true), ['4.15.40'])),
    digests(pathBundle(true)),
    'running 4.15.40: every image',
  );
  t.same(
    digests(withoutPassedReleases(pathBundle(true), ['4.16.2'])),
    [d('e'), d('6'), d('c'), d('a')],
    "running 4.16.2: not 4.15.40's release image and cvo; the shared etcd and the add-on stay",
  );
  t.same(
    digests(withoutPassedReleases(pathBundle(false), ['4.16.2'])),
    [d('b'), d('e'), d('6'), d('c'), d('a')],
    'a bundle with no payloads: its release image alone',
  );
});
