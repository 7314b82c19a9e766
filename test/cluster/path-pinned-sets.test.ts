// PinnedImageSets of an update path, one series per release (#43): the signed head lists each
// release's payload, so prepare and upgrade (real CLI, API stand-in with the shipped admin RBAC,
// the CVO's history scripted as the CVO writes it) write a series per release and machine pool,
// each named and labelled for its version; once ClusterVersion's history says a later release of
// the path Completed, the earlier release's sets (and the start's) are taken out of the pools and
// deleted, said with why, while an image the later release shares stays pinned by its own sets.
// They go pool by pool: only from a pool whose status (as the MCO writes it, scripted here) says
// every node runs its rendered config; a paused or updating pool keeps them, said, until a later
// run. A path bundle built before the head listed payloads keeps one series named for the last
// release and deletes nothing of the start's. A failed delete after the last hop is said, and
// the pools are unpaused all the same; a pool changed between read and write (409) is read again.
import t from 'tap';
import { pinnedSetName, releaseLabel, releaseSeries } from '@offline-bundle/cluster';
import { ART_REPO, RELEASE_REPO } from './lib.js';
import { pathPinnedSetup } from './path-pinned-setup.js';

const {
  api,
  cluster,
  p,
  older,
  image1,
  image2,
  shared,
  START_SET,
  START_MASTER,
  names,
  pinned,
  listed,
  seed,
  cvo,
  mco,
} = await pathPinnedSetup(t);

t.test(
  "prepare: a series per release and pool, each named for its version; an image both releases share in both; the start's set stays",
  async (t) => {
    seed(p);
    const r = await cluster(['prepare', p.file, '--key', p.pub, '--json']);
    t.equal(r.code, 0, r.stderr);
    t.match(JSON.parse(r.stdout).pinnedImageSets, {
      applied: [
        {
          pool: 'master',
          sets: ['offline-bundle-4.15.40-master-1', 'offline-bundle-4.16.2-master-1'],
        },
        {
          pool: 'worker',
          sets: ['offline-bundle-4.15.40-worker-1', 'offline-bundle-4.16.2-worker-1'],
        },
      ],
      removed: [],
    });
    t.same(
      names('4.15.40'),
      ['offline-bundle-4.15.40-master-1', 'offline-bundle-4.15.40-worker-1'],
      'labelled with their release',
    );
    t.same(
      pinned('offline-bundle-4.15.40-worker-1'),
      [`${ART_REPO}@${p.via[0]!.payloadDigest}`, image1, shared].sort(),
      '4.15.40: its own payload, as the head lists it',
    );
    t.same(
      pinned('offline-bundle-4.16.2-worker-1'),
      [`${ART_REPO}@${p.payloadDigest}`, image2, shared].sort(),
      '4.16.2: its own; the shared image in both',
    );
    t.same(
      listed('worker'),
      [
        'site-extras',
        START_SET,
        'offline-bundle-4.15.40-worker-1',
        'offline-bundle-4.16.2-worker-1',
      ],
      'listed in the pool beside the others',
    );
    t.ok(
      api.get('pinnedimagesets', START_SET),
      'the release the path starts from keeps its set until the first hop Completed',
    );
    t.ok(api.get('pinnedimagesets', START_MASTER));
  },
);

t.test(
  "upgrade, hop by hop: past each release, its sets go pool by pool, once the pool's nodes all run a later one; a paused pool keeps them, said",
  async (t) => {
    seed(p);
    t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
    t.equal((await cluster(['upgrade', p.file, '--key', p.pub])).code, 0, 'hop one');
    t.ok(api.get('pinnedimagesets', START_SET), "hop one under way: the start's set stays");
    cvo('4.15.40', image1, 'Completed');
    mco('master', 'updated', 'rendered-master-2');
    mco('worker', 'pending', 'rendered-worker-2');
    const two = await cluster(['upgrade', p.file, '--key', p.pub]);
    t.equal(two.code, 0, two.stderr);
    t.match(
      two.stdout,
      `removed 4.14.30's (${START_MASTER}): the cluster completed 4.15.40, later on the path`,
    );
    t.match(
      two.stdout,
      "kept 4.14.30's pins on pool worker: it is paused, so its nodes have not all updated yet (run the command again once they have)",
    );
    t.equal(
      api.get('pinnedimagesets', START_MASTER),
      undefined,
      "the control plane's pool runs 4.15.40: its start set deleted",
    );
    t.ok(
      api.get('pinnedimagesets', START_SET),
      "the paused worker pool's nodes still run 4.14.30: its set stays",
    );
    t.ok(listed('worker').includes(START_SET), 'and stays listed in the pool');
    t.same(names('4.15.40').length, 2, "the running release's sets stay through hop two");
    cvo('4.16.2', image2, 'Completed');
    mco('master', 'updated', 'rendered-master-3');
    mco('worker', 'pending', 'rendered-worker-3');
    const fin = await cluster(['upgrade', p.file, '--key', p.pub, '--json']);
    t.equal(fin.code, 0, fin.stderr);
    const j = JSON.parse(fin.stdout);
    t.equal(j.state, 'finished');
    t.equal(
      api.get('machineconfigpools', 'worker')!.spec.paused,
      false,
      'the run unpaused the pool',
    );
    t.match(j.pinnedImageSets, {
      removed: ['offline-bundle-4.15.40-master-1'],
      passed: [{ version: '4.15.40', after: '4.16.2', sets: ['offline-bundle-4.15.40-master-1'] }],
      held: [
        { version: '4.14.30', pool: 'worker' },
        { version: '4.15.40', pool: 'worker', why: 'its nodes have not all updated yet' },
      ],
    });
    t.same(
      names('4.15.40'),
      ['offline-bundle-4.15.40-worker-1'],
      "the worker pool's nodes have not all updated: 4.15.40's worker set stays",
    );
    t.ok(api.get('pinnedimagesets', START_SET), "and the start's");
    mco('worker', 'updating', 'rendered-worker-3');
    const mid = await cluster(['upgrade', p.file, '--key', p.pub]);
    t.equal(mid.code, 0, mid.stderr);
    t.match(mid.stdout, "kept 4.14.30's pins on pool worker: its nodes have not all updated yet");
    t.ok(api.get('pinnedimagesets', START_SET), 'updating: still kept');
    mco('worker', 'updated', 'rendered-worker-3');
    const done = await cluster(['upgrade', p.file, '--key', p.pub, '--json']);
    t.equal(done.code, 0, done.stderr);
    const dj = JSON.parse(done.stdout);
    t.equal(dj.state, 'done');
    t.same(
      [...dj.pinnedImageSets.removed].sort(),
      [START_SET, 'offline-bundle-4.15.40-worker-1'].sort(),
      'a later run, once the pool updated, drops what it kept',
    );
    t.same(names('4.15.40'), [], "4.15.40's sets deleted once every pool runs 4.16.2");
    t.same(
      listed('worker'),
      ['site-extras', 'offline-bundle-4.16.2-worker-1'],
      'and out of the pool',
    );
    t.ok(
      pinned('offline-bundle-4.16.2-worker-1').includes(shared),
      "the image both releases share stays pinned by 4.16.2's set",
    );
  },
);

t.test(
  "an add-on of the same digest as an earlier release's payload image stays pinned by the final release",
  async (t) => {
    const addOn = { repository: 'registry.example/site/tool', digest: p.via[0]!.payloadDigest };
    const b = {
      version: '4.16.2',
      images: [
        { repository: ART_REPO, digest: p.via[0]!.payloadDigest, component: 'cli' },
        addOn,
        { repository: ART_REPO, digest: p.payloadDigest, component: 'cli' },
      ],
      path: [
        { version: '4.15.40', payload: [p.via[0]!.releaseDigest, p.via[0]!.payloadDigest] },
        { version: '4.16.2', payload: [p.releaseDigest, p.payloadDigest] },
      ],
    };
    const series = releaseSeries(b, [{ version: '4.15.40', after: '4.16.2' }]);
    t.same(
      series.map((s) => s.version),
      ['4.16.2'],
    );
    t.ok(
      series[0]!.images.some((i) => i.repository === addOn.repository),
      "the add-on is not only a payload's component: the final release keeps it",
    );
    const catalog = releaseSeries(
      {
        ...b,
        images: [
          ...b.images.slice(0, 1),
          { ...addOn, component: 'operator-catalog' },
          b.images[2]!,
        ],
      },
      [{ version: '4.15.40', after: '4.16.2' }],
    );
    t.ok(
      catalog[0]!.images.some((i) => i.digest === addOn.digest),
      "an operator catalog is no payload's component either",
    );
  },
);

t.test(
  'a version that is no label value: sanitized with a short hash; set names of two such versions do not collide',
  async (t) => {
    t.equal(releaseLabel('4.16.2'), '4.16.2', 'a plain version is its own label');
    const odd = releaseLabel('4.16.2+fips_1');
    t.match(odd, /^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/);
    t.ok(odd.length <= 63);
    t.not(releaseLabel('4.16.2+a'), releaseLabel('4.16.2-a'));
    t.ok(releaseLabel('x'.repeat(80)).length <= 63);
    t.equal(
      pinnedSetName('4.16.2', 'worker', 1),
      'offline-bundle-4.16.2-worker-1',
      "a plain version's names are as before",
    );
    t.not(pinnedSetName('4.16.2_a', 'worker', 1), pinnedSetName('4.16.2+a', 'worker', 1));
  },
);

t.test(
  "a later prepare: keeps the running release's sets while the next hop is under way, drops them once it Completed",
  async (t) => {
    seed(p);
    t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
    cvo('4.15.40', image1, 'Completed');
    cvo('4.16.2', image2, 'Partial');
    t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
    t.same(names('4.15.40').length, 2, 'hop two under way: 4.15.40 runs, its sets stay');
    cvo('4.16.2', image2, 'Completed');
    const r = await cluster(['prepare', p.file, '--key', p.pub]);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stdout,
      "removed 4.15.40's (offline-bundle-4.15.40-master-1, offline-bundle-4.15.40-worker-1): the cluster completed 4.16.2, later on the path",
    );
    t.same(names('4.15.40'), []);
    t.same(names('4.16.2'), ['offline-bundle-4.16.2-master-1', 'offline-bundle-4.16.2-worker-1']);
  },
);

t.test(
  'a path bundle whose head lists no payloads (built before): one series for the path, named for its last release',
  async (t) => {
    seed(older);
    const r = await cluster(['prepare', older.file, '--key', older.pub, '--json']);
    t.equal(r.code, 0, r.stderr);
    t.same(
      names('4.15.40'),
      [],
      "no series of its own: the head does not say which images are 4.15.40's",
    );
    t.same(
      pinned('offline-bundle-4.16.2-worker-1'),
      [
        `${ART_REPO}@${older.via[0]!.payloadDigest}`,
        `${ART_REPO}@${older.payloadDigest}`,
        `${RELEASE_REPO}@${older.via[0]!.releaseDigest}`,
        `${RELEASE_REPO}@${older.releaseDigest}`,
      ].sort(),
    );
    t.equal((await cluster(['upgrade', older.file, '--key', older.pub])).code, 0, 'hop one');
    cvo('4.15.40', `${RELEASE_REPO}@${older.via[0]!.releaseDigest}`, 'Completed');
    const two = await cluster(['upgrade', older.file, '--key', older.pub, '--json']);
    t.equal(two.code, 0, two.stderr);
    t.match(JSON.parse(two.stdout).pinnedImageSets, { removed: [] });
    t.ok(
      api.get('pinnedimagesets', START_MASTER),
      "no lists: the start's sets stay after hop one, as before the lists (every pool updated or not)",
    );
    t.ok(api.get('pinnedimagesets', START_SET));
  },
);
