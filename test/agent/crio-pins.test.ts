// The CRI-O pins drop-in next to the MCO's PinnedImageSet file (contract: crio.conf(5) and
// CRI-O's drop-in merge, where the last file setting pinned_images wins; CRI-O cannot run
// here). Our file must carry the other files' pins and follow them when they change.
import t from 'tap';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import {
  AgentError,
  CrioTarget,
  adoptRunningRelease,
  checkMirrorUsed,
  checkPins,
  checkPinsSettled,
  createLogger,
  parseConfig,
  watchCrioPins,
  type ImageInspector,
} from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';

const parseToml = (
  createRequire(new URL('../../packages/runtime/package.json', import.meta.url))('smol-toml') as {
    parse: (s: string) => Record<string, any>;
  }
).parse;
const quiet = createLogger(process.stderr, true);
/** The AgentError reason `p` rejects with (undefined when it resolves). */
async function reasonOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return err instanceof AgentError ? err.reason : `not an AgentError: ${String(err)}`;
  }
}

async function node(t: any) {
  const root = await tmpdir(t, 'ob-crio-pins-');
  const reloads = join(root, 'reloads');
  const config = parseConfig(
    `root: ${root}\nruntime: crio\narch: amd64\ntrust:\n  keys: [/k.pub]\nmedia:\n  pollSeconds: 1\nreload:\n  command: [sh, -c, ${JSON.stringify(`echo x >> ${reloads}`)}]\n`,
  );
  await mkdir(config.paths.crioDropInDir, { recursive: true });
  const mco = join(config.paths.crioDropInDir, '50-pinned-images');
  const ours = join(config.paths.crioDropInDir, 'offline-bundle-pins.conf');
  const pinsIn = async (f: string): Promise<string[]> =>
    parseToml(await readFile(f, 'utf8')).crio.image.pinned_images;
  const reloadCount = async () =>
    (await readFile(reloads, 'utf8').catch(() => '')).split('\n').filter(Boolean).length;
  const writeMco = (pins: string[]) =>
    writeFile(
      mco,
      `[crio.image]\npinned_images = [${pins.map((p) => JSON.stringify(p)).join(', ')}]\n`,
    );
  return { root, config, mco, ours, pinsIn, reloadCount, writeMco };
}

const A = 'quay.io/acme/app@sha256:' + 'a'.repeat(64);
const B = 'quay.io/acme/tool@sha256:' + 'b'.repeat(64);
const M1 = 'quay.io/openshift/mco-pinned@sha256:' + '1'.repeat(64);
const M2 = 'quay.io/openshift/mco-pinned@sha256:' + '2'.repeat(64);

t.test(
  "pins carry the MCO file's pins (a file without .conf is read, as CRI-O does)",
  async (t) => {
    const n = await node(t);
    await n.writeMco([M1]);
    const target = new CrioTarget(n.config, quiet);
    await target.pin([A, B], []);
    t.same(await n.pinsIn(n.ours), [M1, A, B].sort(), "ours = our pins + the MCO's");
    t.equal(await n.reloadCount(), 1, 'one reload after writing');
    await target.pin([A, B], []);
    t.equal(await n.reloadCount(), 1, 'nothing changed: no reload');
  },
);

t.test('remerge follows the MCO file when it changes later, and only then reloads', async (t) => {
  const n = await node(t);
  await n.writeMco([M1]);
  const target = new CrioTarget(n.config, quiet);
  await target.pin([A], []);
  await n.writeMco([M1, M2]);
  t.equal(await target.remerge(), true, 'rewritten after the MCO added a pin');
  t.same(await n.pinsIn(n.ours), [M1, M2, A].sort());
  t.equal(await n.reloadCount(), 2, 'reloaded once more');
  await n.writeMco([M2]);
  await target.remerge();
  t.same(await n.pinsIn(n.ours), [M2, A].sort(), 'a pin the MCO dropped is dropped from ours too');
  t.equal(await target.remerge(), false, 'no change: nothing written');
  t.equal(await n.reloadCount(), 3);
});

t.test('remerge before any pin of ours does nothing', async (t) => {
  const n = await node(t);
  await n.writeMco([M1]);
  t.equal(await new CrioTarget(n.config, quiet).remerge(), false);
  t.same(await readdir(n.config.paths.crioDropInDir), ['50-pinned-images']);
});

t.test("the daemon's watcher re-merges within its poll interval", async (t) => {
  const n = await node(t);
  await new CrioTarget(n.config, quiet).pin([A], []);
  const stop = watchCrioPins(n.config, quiet, (fn) => fn());
  t.teardown(stop);
  await n.writeMco([M1]);
  await until('the MCO pin in ours', async () => (await n.pinsIn(n.ours)).includes(M1), {
    timeoutMs: 30_000,
    stepMs: 50,
  });
  t.same(await n.pinsIn(n.ours), [M1, A].sort(), 'the MCO pin added without any load');
});

t.test(
  'an unreadable foreign file stops the pin (PinFailed) and leaves ours as it was',
  async (t) => {
    const n = await node(t);
    await writeFile(n.mco, '[crio.image\npinned_images = [');
    t.equal(await reasonOf(new CrioTarget(n.config, quiet).pin([A], [])), 'PinFailed');
    t.same(await readdir(n.config.paths.crioDropInDir), ['50-pinned-images']);
  },
);

// ------------------------------------------------------------------------------------------
// The checks after the pulls and pins, against what a CRI ImageService reports

function inspector(
  images: { id: string; names: string[]; pinned: boolean; statusPinned?: boolean }[],
): ImageInspector {
  return {
    listImages: async () =>
      images.map((i) => ({
        id: i.id,
        repoTags: i.names.filter((n) => !n.includes('@')),
        repoDigests: i.names.filter((n) => n.includes('@')),
        size: 1,
        pinned: i.pinned,
      })),
    imageStatus: async (ref: string) => {
      const i = images.find((x) => x.names.includes(ref));
      return i
        ? { id: i.id, repoTags: [], repoDigests: [], size: 1, pinned: i.statusPinned ?? i.pinned }
        : null;
    },
  };
}

t.test('checkPins', async (t) => {
  t.test('a runtime that reports pins: all pinned → verifiable', async (t) => {
    const r = await checkPins(
      inspector([
        { id: '1', names: [A], pinned: true },
        { id: '2', names: [B], pinned: true },
      ]),
      { mustPin: [A, B], kept: [], released: [] },
    );
    t.same(r, { verifiable: true, stillPinned: [] });
  });
  t.test('one of ours not pinned → PinFailed', async (t) => {
    const p = checkPins(
      inspector([
        { id: '1', names: [A], pinned: true },
        { id: '2', names: [B], pinned: false },
      ]),
      { mustPin: [A, B], kept: [], released: [] },
    );
    await t.rejects(p, {
      reason: 'PinFailed',
      message: new RegExp(B.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
    });
  });
  t.test(
    'ListImages counts over ImageStatus (CRI-O versions where ImageStatus says false)',
    async (t) => {
      const r = await checkPins(
        inspector([{ id: '1', names: [A], pinned: true, statusPinned: false }]),
        { mustPin: [A], kept: [], released: [] },
      );
      t.equal(r.verifiable, true);
    },
  );
  t.test('a runtime that reports no pins at all → not verifiable, never claimed', async (t) => {
    const r = await checkPins(inspector([{ id: '1', names: [A], pinned: false }]), {
      mustPin: [A],
      kept: [],
      released: [],
    });
    t.same(r, { verifiable: false, stillPinned: [] });
  });
  t.test(
    'an image of ours missing → PinFailed; one of a kept release missing → only a warning',
    async (t) => {
      t.equal(
        await reasonOf(checkPins(inspector([]), { mustPin: [A], kept: [], released: [] })),
        'PinFailed',
      );
      const r = await checkPins(inspector([{ id: '1', names: [A], pinned: true }]), {
        mustPin: [A],
        kept: [B],
        released: [],
      });
      t.equal(r.verifiable, true);
    },
  );
  t.test('a released image still pinned is reported (UnpinPending)', async (t) => {
    const r = await checkPins(
      inspector([
        { id: '1', names: [A], pinned: true },
        { id: '2', names: [B], pinned: true },
      ]),
      { mustPin: [A], kept: [], released: [B] },
    );
    t.same(r.stillPinned, [B]);
  });
});

t.test(
  'checkPinsSettled: "never reports pins" (a containerd before 1.6.22 by its version) stops asking only while no pin shows at all',
  async (t) => {
    t.test('no pin at all: one ListImages, not verifiable (no 1 s of asking again)', async (t) => {
      const images = [{ id: '1', names: [A], pinned: false }];
      let lists = 0;
      const base = inspector(images);
      const r = await checkPinsSettled(
        {
          ...base,
          listImages: () => {
            lists++;
            return base.listImages();
          },
        },
        { mustPin: [A], kept: [], released: [] },
        quiet,
        1000,
        0,
      );
      t.same(r, { verifiable: false, stillPinned: [] });
      t.equal(lists, 1, 'asked once');
    });
    t.test(
      'another image pinned, ours a moment later: waited for, not PinFailed, whatever the version said',
      async (t) => {
        const images = [
          { id: 'm', names: [M1], pinned: true },
          { id: '1', names: [A], pinned: false },
        ];
        let lists = 0;
        const base = inspector(images);
        const r = await checkPinsSettled(
          {
            ...base,
            listImages: () => {
              if (++lists === 2) images[1]!.pinned = true;
              return base.listImages();
            },
          },
          { mustPin: [A], kept: [], released: [] },
          quiet,
          1000,
          0,
        );
        t.same(r, { verifiable: true, stillPinned: [] });
        t.equal(lists, 2);
      },
    );
  },
);

t.test('checkMirrorUsed', async (t) => {
  const m = {
    images: [
      { repository: 'quay.io/acme/app', digest: 'sha256:' + 'a'.repeat(64) },
      { repository: 'quay.io/acme/tool', digest: 'sha256:' + 'b'.repeat(64) },
    ],
  } as any;
  // what the registry's ServedLog answers: the manifests it was asked for
  const asked = new Set(['quay.io/acme/app@sha256:' + 'a'.repeat(64)]);
  const served = {
    servedManifest: (name: string, digest: string) => asked.has(`${name}@${digest}`),
  } as any;
  t.throws(() => checkMirrorUsed(m, new Set(), served), {
    reason: 'MirrorNotUsed',
    message: /quay\.io\/acme\/tool@/,
  });
  t.doesNotThrow(
    () => checkMirrorUsed(m, new Set(['quay.io/acme/tool@sha256:' + 'b'.repeat(64)]), served),
    'an image present before the pulls needs no fetch',
  );
  asked.add('quay.io/acme/tool@sha256:' + 'b'.repeat(64));
  t.doesNotThrow(() => checkMirrorUsed(m, new Set(), served));
});

t.test(
  'adoptRunningRelease: the release running before the first bundle stays pinned',
  async (t) => {
    const dir = await tmpdir(t, 'ob-adopt-');
    const repo = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
    const running = [`${repo}@sha256:${'1'.repeat(64)}`, `${repo}@sha256:${'2'.repeat(64)}`];
    const incoming = {
      release: { version: '4.14.39' },
      images: [{ repository: repo, digest: 'sha256:' + '3'.repeat(64) }],
    } as any;
    const insp = inspector([
      { id: '1', names: [running[0]!], pinned: false },
      { id: '2', names: [running[1]!], pinned: false },
      { id: '3', names: [`${repo}@sha256:${'3'.repeat(64)}`], pinned: false },
      { id: '4', names: ['docker.io/library/busybox@sha256:' + '4'.repeat(64)], pinned: false },
      {
        id: '5',
        names: ['quay.io/openshift-release-dev/ocp-release@sha256:' + '5'.repeat(64)],
        pinned: false,
      },
    ]);
    const image = 'quay.io/openshift-release-dev/ocp-release@sha256:' + '5'.repeat(64);
    const absent = 'quay.io/openshift-release-dev/ocp-release@sha256:' + '6'.repeat(64);
    const worker = await adoptRunningRelease({
      stateDir: join(dir, 'worker'),
      arch: 'amd64',
      running: { version: '4.14.38', image: absent },
      incoming,
      releases: [],
      inspector: insp,
    });
    t.same(
      worker?.refs,
      [...running].sort(),
      'a release image the node does not hold (a worker) is not pinned: the pin would fail',
    );
    const rec = await adoptRunningRelease({
      stateDir: dir,
      arch: 'amd64',
      running: { version: '4.14.38', image },
      incoming,
      releases: [],
      inspector: insp,
    });
    t.same(
      rec?.refs,
      [image, ...running].sort(),
      'the release image and the payload images on the node, not the incoming one, not workloads',
    );
    t.equal(rec?.source, 'node');
    t.ok(
      JSON.parse(await readFile(join(dir, 'releases/4.14.38-amd64.json'), 'utf8')).refs.includes(
        image,
      ),
      'recorded in the state directory',
    );
    t.equal(
      await adoptRunningRelease({
        stateDir: dir,
        arch: 'amd64',
        running: { version: '4.14.38', image },
        incoming,
        releases: [rec!],
        inspector: insp,
      }),
      undefined,
      'a release already recorded is left as it is',
    );
  },
);
