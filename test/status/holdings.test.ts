// What a node's runtime holds, as the agent publishes it (status.runtime, issue #38): produced by
// the agent's own publishHoldings from a fake CRI image list through the real StatusTracker and
// toResource, checked against deploy/crd.yaml's schema; its size for 1,000 images; and a node
// publishing garbage: the CRD refuses it, toResource and the admin's reading bound it.
import { createHash } from 'node:crypto';
import t from 'tap';
import {
  HOLDINGS_LIMITS,
  REQUIRED,
  StatusTracker,
  boundHoldings,
  emptyStatus,
  heldKey,
  heldState,
  imageKey,
  runtimeHoldings,
  toResource,
  type ListedImage,
  type NodeStatus,
} from '@offline-bundle/status';
import { publishHoldings } from '../../agent/dist/runtime/runtime-checks.js';
import { compileSchema, crdSchema, loadCrd, type Doc } from './lib.js';

const hex = (s: string) => createHash('sha256').update(s).digest('hex');
const dg = (s: string) => `sha256:${hex(s)}`;
const schema = crdSchema(await loadCrd());
const validate = compileSchema(schema, { closed: true });

const REL = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
const img = (
  repo: string,
  seed: string,
  pinned: boolean,
  tag?: string,
): ListedImage & { id: string; size: number } => ({
  id: dg(`id-${seed}`),
  size: 1,
  pinned,
  repoTags: tag ? [`${repo}:${tag}`] : [],
  repoDigests: [`${repo}@${dg(seed)}`],
});

/** A tracker whose status has gone through toResource, as the reporter writes it. */
async function published(
  listed: ListedImage[],
  refs: string[],
): Promise<{ status: NodeStatus; resource: Doc }> {
  const tracker = new StatusTracker(emptyStatus('worker-0'));
  await publishHoldings(
    { listImages: async () => listed as never, imageStatus: async () => undefined },
    tracker,
    refs,
  );
  const status = tracker.current;
  return {
    status,
    resource: toResource(status, 'worker-0', { heartbeatSeconds: 60 }) as unknown as Doc,
  };
}

t.test(
  'the agent publishes counts, a digest of every name, what of its bundle is missing or unpinned, and fingerprints of what it holds',
  async (t) => {
    const listed = [
      img(REL, 'a', true),
      img(REL, 'b', true),
      img(REL, 'c', false),
      img('registry.example.com/team/web', 'web', false, 'v3'),
      img('docker.io/library/busybox', 'bb', true, 'latest'),
    ];
    const refs = [
      `${REL}@${dg('a')}`,
      `${REL}@${dg('b')}`,
      `${REL}@${dg('c')}`,
      `${REL}@${dg('gone')}`,
    ];
    const { status, resource } = await published(listed, refs);
    const h = status.runtime!;
    t.match(h, {
      images: 5,
      pinned: 3,
      references: 7,
      pinsReported: true,
      bundle: {
        refs: 4,
        missing: [`${REL}@${dg('gone')}`],
        unpinned: [`${REL}@${dg('c')}`],
        truncated: false,
      },
    });
    t.match(h.digest, /^sha256:[0-9a-f]{64}$/);
    t.ok(validate(resource), JSON.stringify(validate.errors));
    t.same(resource.status.runtime, h, 'toResource keeps it as it is, being within bounds');
    // what the admin asks, by the name a pod asks by
    t.equal(heldState(h, `${REL}@${dg('a')}`), 'pinned');
    t.equal(heldState(h, `${REL}@${dg('c')}`), 'unpinned');
    t.equal(heldState(h, `${REL}@${dg('gone')}`), 'absent');
    t.equal(heldState(h, 'registry.example.com/team/web:v3'), 'unpinned', 'by tag');
    t.equal(
      heldState(h, 'busybox'),
      'pinned',
      "a short name is the runtime's docker.io/library/busybox:latest",
    );
    t.equal(heldState(h, 'registry.example.com/team/web:v4'), 'absent', 'another tag is not held');
    t.equal(heldState(undefined, 'busybox'), 'unknown', 'a node that publishes nothing');
    t.equal(
      imageKey(`${REL}:4.15@${dg('a')}`),
      `${REL}@${dg('a')}`,
      'a digest wins over a tag, as the runtime looks it up',
    );
    // the same names held: the same digest, pinned or not
    const again = runtimeHoldings(
      [...listed].reverse().map((i) => ({ ...i, pinned: false })),
      refs,
    );
    t.equal(again.digest, h.digest, 'the digest is over the names, sorted');
    t.equal(again.pinsReported, false);
    t.same(
      again.bundle.unpinned,
      [],
      'a runtime that reports no pins: unpinned is not known, not said',
    );
  },
);

t.test('1,000 images: the whole NodeBundleStatus stays well under 128 KiB', async (t) => {
  const listed: ListedImage[] = [];
  const refs: string[] = [];
  for (let i = 0; i < 1000; i++) {
    // 200 payload images by digest (the bundle), 800 workload images by tag and digest
    const payload = i < 200;
    const repo = payload ? REL : `registry.example.com/team-${i % 40}/service-${i}`;
    listed.push(img(repo, `i${i}`, payload || i % 3 === 0, payload ? undefined : `v1.${i}`));
    if (payload) refs.push(`${repo}@${dg(`i${i}`)}`);
  }
  for (let i = 0; i < 5; i++) refs.push(`${REL}@${dg(`lost${i}`)}`);
  const tracker = new StatusTracker(emptyStatus('worker-0'));
  // a Ready status with its conditions and history, as after a load
  tracker.update((s) => {
    s.phase = 'Ready';
    s.bundle = {
      file: '/run/media/STICK/4.15.1.bundle',
      version: '4.15.1',
      digest: dg('file'),
      media: 'STICK',
      mode: 'staged',
    };
    s.history = [
      { version: '4.15.0', state: 'running', at: new Date().toISOString() },
      { version: '4.15.1', state: 'loaded', at: new Date().toISOString() },
    ];
  });
  for (const c of ['Verified', 'Staged', 'Preloaded', 'Pinned', 'Ready'] as const)
    tracker.condition(
      c,
      'True',
      'Done',
      `${c}: a sentence of ordinary length about what happened on this node`,
    );
  await publishHoldings(
    { listImages: async () => listed as never, imageStatus: async () => undefined },
    tracker,
    refs,
  );
  const resource = toResource(tracker.current, 'worker-0', { heartbeatSeconds: 60 });
  const bytes = Buffer.byteLength(JSON.stringify(resource));
  const runtimeBytes = Buffer.byteLength(JSON.stringify(resource.status.runtime));
  t.comment(
    `1,000 images (1,800 names): NodeBundleStatus ${bytes} bytes, of which status.runtime ${runtimeBytes}`,
  );
  t.ok(validate(resource), JSON.stringify(validate.errors?.slice(0, 3)));
  t.ok(bytes < 64 * 1024, `${bytes} bytes < 64 KiB`);
  t.ok(bytes < 128 * 1024, `${bytes} bytes < 128 KiB`);
  const h = resource.status.runtime!;
  t.match(h, {
    images: 1000,
    references: 1800,
    bundle: { refs: 205, truncated: false },
    held: { truncated: false },
  });
  t.equal(h.bundle.missing.length, 5);
  t.equal(
    h.held.pinned.length + h.held.unpinned.length,
    1800,
    'every name held has its fingerprint',
  );
  t.equal(heldState(h, 'registry.example.com/team-20/service-300:v1.300'), 'pinned');
  t.equal(heldState(h, 'registry.example.com/team-21/service-301:v1.301'), 'unpinned');
  // 50 nodes of those
  t.comment(
    `50 nodes: ${Math.round((50 * bytes) / 1024)} KiB of NodeBundleStatuses for the admin to list`,
  );
});

t.test(
  'the bounds: past them, names are left out and said (truncated), never cut short',
  async (t) => {
    const many: ListedImage[] = Array.from({ length: 3000 }, (_, i) =>
      img(`registry.example.com/r${i}`, `m${i}`, i % 2 === 0, 'v1'),
    );
    const refs = Array.from({ length: 250 }, (_, i) => `${REL}@${dg(`never${i}`)}`);
    const h = runtimeHoldings(many, refs);
    t.equal(h.held.pinned.length + h.held.unpinned.length, HOLDINGS_LIMITS.heldKeys);
    t.equal(h.held.pinned.length, 3000, 'the pinned ones first');
    t.equal(h.held.truncated, true);
    t.equal(h.bundle.missing.length, HOLDINGS_LIMITS.bundleNames);
    t.equal(h.bundle.truncated, true);
    t.equal(
      heldState(h, 'registry.example.com/r1:v1') === 'unpinned' ||
        heldState(h, 'registry.example.com/r1:v1') === 'unknown',
      true,
      'a name left out is unknown, not absent',
    );
    t.equal(
      heldState(h, 'registry.example.com/none:v1'),
      'unknown',
      'after a cut, absence proves nothing',
    );
    t.ok(
      validate(toResource({ ...emptyStatus('worker-0'), runtime: h }, 'worker-0')),
      JSON.stringify(validate.errors?.slice(0, 3)),
    );
    t.equal(
      REQUIRED['status.runtime'],
      undefined,
      'nothing of it required by the CRD: a refused part is left out alone',
    );
    const rt = schema.properties.status.properties.runtime.properties;
    t.same(
      [
        rt.bundle.properties.missing.maxItems,
        rt.bundle.properties.unpinned.maxItems,
        rt.bundle.properties.missing.items.maxLength,
        rt.held.properties.pinned.maxItems,
        rt.held.properties.unpinned.items.maxLength,
      ],
      [
        HOLDINGS_LIMITS.bundleNames,
        HOLDINGS_LIMITS.bundleNames,
        HOLDINGS_LIMITS.imageRef,
        HOLDINGS_LIMITS.heldKeys,
        HOLDINGS_LIMITS.key,
      ],
      "the CRD bounds are the code's",
    );
  },
);

t.test(
  "garbage published by a node: the CRD refuses it; toResource and the admin's reading bound it or ignore it",
  async (t) => {
    const good = runtimeHoldings([img(REL, 'a', true)], [`${REL}@${dg('a')}`]);
    const withRuntime = (runtime: unknown) => ({
      ...toResource(emptyStatus('worker-0'), 'worker-0'),
      status: { ...toResource(emptyStatus('worker-0'), 'worker-0').status, runtime },
    });
    const cases: [string, unknown, RegExp][] = [
      ['images a string', { ...good, images: 'many' }, /runtime\/images/],
      ['digest not a digest', { ...good, digest: 'md5:x' }, /runtime\/digest/],
      [
        'held a string',
        { ...good, held: { pinned: 'abc', unpinned: [] } },
        /runtime\/held\/pinned/,
      ],
      [
        'a fingerprint of another form',
        { ...good, held: { pinned: ['ZZ'], unpinned: [] } },
        /runtime\/held\/pinned\/0/,
      ],
      [
        'too many fingerprints',
        {
          ...good,
          held: {
            pinned: Array.from({ length: HOLDINGS_LIMITS.heldKeys + 1 }, (_, i) =>
              hex(String(i)).slice(0, 16),
            ),
            unpinned: [],
          },
        },
        /runtime\/held\/pinned/,
      ],
      [
        'an overlong name',
        {
          ...good,
          bundle: {
            refs: 1,
            missing: ['x'.repeat(HOLDINGS_LIMITS.imageRef + 1)],
            unpinned: [],
            truncated: false,
          },
        },
        /runtime\/bundle\/missing\/0/,
      ],
      [
        'too many names',
        {
          ...good,
          bundle: {
            refs: 1,
            missing: Array.from({ length: HOLDINGS_LIMITS.bundleNames + 1 }, (_, i) => `r${i}`),
            unpinned: [],
            truncated: false,
          },
        },
        /runtime\/bundle\/missing/,
      ],
    ];
    for (const [name, runtime, where] of cases) {
      t.notOk(validate(withRuntime(runtime)), `${name}: refused by the CRD`);
      t.match(
        JSON.stringify(
          validate.errors?.map(
            (e) => e.instancePath + ' ' + String(e.params?.missingProperty ?? ''),
          ),
        ),
        where,
        name,
      );
    }
    // the admin's side: the core malformed → nothing; lists malformed → what is valid, marked cut
    t.equal(boundHoldings({ ...good, images: 'many' }), undefined);
    t.equal(boundHoldings({ ...good, digest: 'md5:x' }), undefined);
    t.equal(
      boundHoldings({ ...good, digest: undefined }),
      undefined,
      'the CRD requires none of it: the admin side does',
    );
    t.equal(boundHoldings('garbage'), undefined);
    t.equal(boundHoldings(null), undefined);
    const mixed = boundHoldings({
      ...good,
      held: { pinned: ['ZZ', 42, good.held.pinned[0]], unpinned: 'x' },
      bundle: { refs: -3, missing: [1, 'ok'], unpinned: null },
    })!;
    t.same(mixed.held.pinned, good.held.pinned);
    t.same(mixed.held.unpinned, []);
    t.equal(
      mixed.held.truncated,
      true,
      'a list that was not one: what is held beyond is not known',
    );
    t.same(mixed.bundle, { refs: 0, missing: ['ok'], unpinned: [], truncated: true });
    t.equal(heldState(mixed, 'registry.example.com/none:v1'), 'unknown');
    // lists left out are not empty lists: a node publishing only counts holds nothing known
    const countsOnly = boundHoldings({ ...good, images: 5000, bundle: { refs: 5000 }, held: {} })!;
    t.equal(
      countsOnly.bundle.truncated,
      true,
      'refs without missing/unpinned lists: what it lacks is not known',
    );
    t.equal(
      countsOnly.held.truncated,
      true,
      'images without held lists: what it holds is not known',
    );
    t.equal(heldState(countsOnly, `${REL}@${dg('a')}`), 'unknown');
    // an agent-side status carrying garbage (a bug, a hand-edited status file) is bounded before it is sent
    const bad = {
      ...emptyStatus('worker-0'),
      runtime: {
        ...good,
        held: {
          pinned: Array.from({ length: 5000 }, (_, i) => hex(`k${i}`).slice(0, 16)),
          unpinned: ['nope'],
          truncated: false,
        },
      },
    } as NodeStatus;
    const sent = toResource(bad, 'worker-0');
    t.ok(validate(sent), 'toResource bounds it to what the CRD accepts');
    t.equal(sent.status.runtime!.held.pinned.length, HOLDINGS_LIMITS.heldKeys);
    t.equal(sent.status.runtime!.held.truncated, true);
    const none = toResource(
      { ...emptyStatus('worker-0'), runtime: { images: 'x' } as never },
      'worker-0',
    );
    t.notOk('runtime' in none.status, 'a malformed one is left out');
    t.equal(heldKey('not a ref!!'), undefined);
  },
);
