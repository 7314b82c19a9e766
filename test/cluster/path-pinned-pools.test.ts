// PinnedImageSets of an update path, pool by pool (#43), the cases around the pools beside the
// hop-by-hop walk of path-pinned-sets.test.ts: an admin-paused canary pool keeps an earlier
// release's pins past the last hop; after the last hop a refused delete is said with what to do
// and the pools are unpaused all the same; a pool changed between our read and our list update
// (409) is read again and the other writer's entry kept. Real CLI, API stand-in (shipped admin
// RBAC), the CVO's history and the MCO's pool status scripted as they write them.
import t from 'tap';
import { pathPinnedSetup } from './path-pinned-setup.js';

const { api, cluster, p, image1, image2, START_SET, START_MASTER, listed, seed, cvo } =
  await pathPinnedSetup(t);

t.test(
  "an admin-paused canary pool keeps the earlier release's pins past the last hop",
  async (t) => {
    seed(p);
    api.put('machineconfigpools', {
      ...api.get('machineconfigpools', 'worker')!,
      spec: { ...api.get('machineconfigpools', 'worker')!.spec, paused: true },
    });
    t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
    cvo('4.15.40', image1, 'Completed');
    cvo('4.16.2', image2, 'Completed');
    const r = await cluster(['prepare', p.file, '--key', p.pub]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, "kept 4.14.30's pins on pool worker: it is paused");
    t.ok(api.get('pinnedimagesets', START_SET), 'the canary still runs 4.14.30');
    t.ok(
      api.get('pinnedimagesets', 'offline-bundle-4.15.40-worker-1'),
      "and 4.15.40's series is kept for it",
    );
    t.equal(
      api.get('pinnedimagesets', START_MASTER),
      undefined,
      "the control plane's pool is past it",
    );
    t.equal(api.get('pinnedimagesets', 'offline-bundle-4.15.40-master-1'), undefined);
  },
);

t.test(
  'after the last hop a refused delete is said with what to do, and the pools are unpaused all the same',
  async (t) => {
    seed(p);
    t.equal((await cluster(['prepare', p.file, '--key', p.pub])).code, 0);
    t.equal((await cluster(['upgrade', p.file, '--key', p.pub])).code, 0, 'hop one');
    cvo('4.15.40', image1, 'Completed');
    t.equal((await cluster(['upgrade', p.file, '--key', p.pub])).code, 0, 'hop two');
    cvo('4.16.2', image2, 'Completed');
    api.intercept = (r) =>
      r.resource === 'pinnedimagesets' && r.verb === 'delete' ? { status: 500 } : undefined;
    const fin = await cluster(['upgrade', p.file, '--key', p.pub]);
    api.intercept = undefined;
    t.equal(fin.code, 0, fin.stderr);
    t.match(
      fin.stdout,
      /could not delete offline-bundle-4\.15\.40-master-1 \(the API server answered 500[^)]*\)[^\n]*: run the command again/,
    );
    t.equal(api.get('machineconfigpools', 'worker')!.spec.paused, false, 'unpaused');
    t.notOk(
      listed('master').includes('offline-bundle-4.15.40-master-1'),
      'out of the pool: the next run deletes it',
    );
    const again = await cluster(['upgrade', p.file, '--key', p.pub, '--json']);
    t.equal(again.code, 0, again.stderr);
    t.equal(
      api.get('pinnedimagesets', 'offline-bundle-4.15.40-master-1'),
      undefined,
      'the next run deleted it',
    );
  },
);

t.test(
  'a pool changed by another writer between the read and the list update (409): read again, its change kept',
  async (t) => {
    seed(p);
    let conflicts = 0;
    api.intercept = (r) => {
      if (
        r.resource !== 'machineconfigpools' ||
        r.verb !== 'patch' ||
        r.name !== 'worker' ||
        conflicts
      )
        return undefined;
      conflicts++;
      const cur = api.get('machineconfigpools', 'worker')!;
      api.put('machineconfigpools', {
        ...cur,
        spec: {
          ...cur.spec,
          pinnedImageSets: [...cur.spec.pinnedImageSets, { name: 'late-extras' }],
        },
      });
      return {
        status: 409,
        body: {
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          reason: 'Conflict',
          code: 409,
          message: 'the object has been modified',
        },
      };
    };
    const r = await cluster(['prepare', p.file, '--key', p.pub]);
    api.intercept = undefined;
    t.equal(r.code, 0, r.stderr);
    t.equal(conflicts, 1);
    const sent = api.requests
      .filter(
        (q) => q.resource === 'machineconfigpools' && q.verb === 'patch' && q.name === 'worker',
      )
      .map((q) => JSON.parse(q.body));
    t.ok(sent.at(-1).metadata.resourceVersion, 'the update names the version it was computed from');
    t.same(
      listed('worker'),
      [
        'site-extras',
        START_SET,
        'late-extras',
        'offline-bundle-4.15.40-worker-1',
        'offline-bundle-4.16.2-worker-1',
      ],
      "the other writer's entry is kept",
    );
  },
);
