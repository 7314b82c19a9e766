// bundle-agent in CRI-O mode, end to end, against the CRI-O contract stand-in
// (test/helpers/crio-standin.mjs): a long-running CRI ImageService that, like CRI-O, reads
// registries.conf.d and crio.conf.d only at start and on SIGHUP. The agent's reload command
// sends that SIGHUP, as `systemctl reload crio` does. CRI-O itself cannot run here.
import t from 'tap';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { pushImage } from '../helpers/images.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { startRegistry } from '../helpers/registry.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  AGENT,
  BUNDLE,
  crioFiles,
  crioNodeConfig,
  crioSighup,
  keygen,
  makeBundle,
  run,
} from './fixtures.js';

// The images' home: a host that never resolves, so only the agent's mirror can serve them.
const ORIGIN = 'origin.offline-bundle.invalid';
const images = [
  { name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } },
  { name: `${ORIGIN}/acme/tool:v2`, files: { 'tool.txt': 'tool v2' } },
];

interface Node {
  dir: string;
  root: string;
  config: string;
  keys: { key: string; pub: string };
  crio: any;
  startCrio: (opts?: Record<string, unknown>) => Promise<any>;
  status: () => Promise<any>;
  leftovers: () => Promise<{ dropIns: string[]; staged: string[] }>;
}

/**
 * A node root whose CRI-O is the stand-in: its socket, config files and drop-in directories
 * all under the root, the agent's reload command its SIGHUP.
 */
async function node(
  t: any,
  opts: { reload?: string[]; baseRegistries?: string; crio?: Record<string, unknown> } = {},
): Promise<Node> {
  const dir = await tmpdir(t, 'ob-crio-e2e-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const p = (rel: string) => join(root, rel);
  const files = await crioFiles(root, opts.baseRegistries);
  const startCrio = (o: Record<string, unknown> = {}) =>
    startCrioStandin(t, {
      ...files,
      ...opts.crio,
      ...o,
    });
  const crio = await startCrio();
  await writeFile(p('run/crio/pid'), String(crio.pid));
  const config = await crioNodeConfig(root, keys.pub, {
    reload: opts.reload ?? crioSighup(p('run/crio/pid')),
    extra: 'preload:\n  method: cri\n  retries: 2\n',
  });
  return {
    dir,
    root,
    config,
    keys,
    crio,
    startCrio,
    status: async () => JSON.parse(await readFile(p('var/lib/bundle-agent/status.json'), 'utf8')),
    leftovers: async () => ({
      dropIns: (await readdir(p('etc/containers/registries.conf.d'))).filter((n) =>
        n.includes('offline-bundle'),
      ),
      staged: await readdir(p('var/lib/upgrade')).catch(() => []),
    }),
  };
}

const load = (n: Node, file: string) =>
  run(AGENT, ['load', file, '--config', n.config, '--json'], process.env, 300_000);
const cond = (status: any, type: string) => status.conditions.find((c: any) => c.type === type);
const agentEvents = (stderr: string) =>
  stderr
    .split('\n')
    .map((l) => /event=(\w+)/.exec(l)?.[1])
    .filter((e): e is string => !!e);

t.test(
  'CRI-O mode against the CRI-O stand-in: reload before the pulls, pins read back (contract test)',
  async (t) => {
    const n = await node(t);
    const file = await makeBundle(n.dir, {
      key: n.keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(n.dir, 'update.bundle'),
    });
    const r = await load(n, file);
    t.equal(r.code, 0, `load exits 0 (stderr: ${r.stderr.slice(-800)})`);

    // the agent's journal: each drop-in change followed by a reload before CRI-O is relied on
    const order = agentEvents(r.stderr)
      .filter((e) => ['mirror', 'reload', 'preload', 'unmirror', 'pin'].includes(e))
      .filter((e, i, a) => e !== a[i - 1]);
    t.same(
      order,
      ['mirror', 'reload', 'preload', 'unmirror', 'pin', 'reload'],
      'drop-in, reload, pulls, drop-in removed, pins, reload',
    );

    // the runtime's own view: it reloaded before the first pull, and every pull came from the mirror
    const ev = await n.crio.events();
    const firstPull = ev.findIndex((e: any) => e.event === 'pull');
    const reloads = ev
      .map((e: any, i: number) => (e.event === 'reload' ? i : -1))
      .filter((i: number) => i >= 0);
    t.ok(
      firstPull > 0 && reloads.some((i: number) => i < firstPull),
      'CRI-O reloaded before the first pull',
    );
    t.ok(
      reloads.some((i: number) => i > firstPull),
      'and again after the pulls (mirror removed, pins)',
    );
    const pulls = ev.filter((e: any) => e.event === 'pull');
    t.ok(
      pulls.length >= 2 && pulls.every((e: any) => e.outcome !== 'error' || e.source !== undefined),
      `${pulls.length} pulls`,
    );

    const status = await n.status();
    t.equal(status.phase, 'Ready');
    t.equal(
      cond(status, 'Pinned')?.status,
      'True',
      'Pinned=True: ListImages reports every image pinned',
    );
    t.same(
      await n.leftovers(),
      { dropIns: [], staged: [] },
      'no mirror drop-in, no staged layout left',
    );

    // the stand-in reports each image pinned, by digest and tag
    const { CriImageClient } = await import('@offline-bundle/runtime');
    const cri = new CriImageClient(n.crio.socket);
    t.teardown(() => cri.close());
    const listed = await cri.listImages();
    for (const img of images) {
      const found = listed.find((i) => i.repoTags.includes(img.name));
      t.ok(found?.pinned, `${img.name} pinned as the runtime reports it`);
    }
  },
);

t.test('without the first reload the load fails, and leaves nothing behind', async (t) => {
  // `true` stands for a reload command that does nothing: CRI-O never sees the mirror
  const n = await node(t, { reload: ['true'] });
  const file = await makeBundle(n.dir, {
    key: n.keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(n.dir, 'update.bundle'),
  });
  const r = await load(n, file);
  t.not(r.code, 0, 'load fails');
  const status = await n.status();
  t.equal(status.phase, 'Failed');
  t.equal(cond(status, 'Failed')?.reason, 'PullFailed', 'the pulls went to the unreachable origin');
  t.same(await n.leftovers(), { dropIns: [], staged: [] });
});

t.test(
  'MirrorNotUsed: the images came from elsewhere (origin reachable, mirror never read)',
  async (t) => {
    const reg = await startRegistry({ timeoutMs: 30_000 });
    t.teardown(() => reg.stop());
    const n = await node(t, {
      reload: ['true'],
      baseRegistries: `unqualified-search-registries = []\n[[registry]]\nlocation = "${reg.host}"\ninsecure = true\n`,
    });
    const app = await pushImage(
      {
        tag: 'v1',
        platforms: [
          { os: 'linux', architecture: 'amd64', layers: [{ 'app.txt': 'app from origin' }] },
        ],
      },
      `${reg.host}/acme/app:v1`,
    );
    const file = join(n.dir, 'origin.bundle');
    const c = await run(BUNDLE, [
      'create',
      '--quiet',
      '--version',
      '1.1.0',
      '--upgrade-from',
      '1.0.0',
      '--image',
      `docker://${app.ref}`,
      '--tls-verify=false',
      '--key',
      n.keys.key,
      '--cache',
      join(n.dir, 'cache'),
      '-o',
      file,
    ]);
    t.equal(c.code, 0, c.stderr);
    const r = await load(n, file);
    t.not(r.code, 0, 'load fails');
    const status = await n.status();
    t.equal(
      cond(status, 'Failed')?.reason,
      'MirrorNotUsed',
      `refused as MirrorNotUsed (${cond(status, 'Failed')?.message})`,
    );
    t.match(cond(status, 'Failed')?.message, /acme\/app@sha256:/, 'names the image');
    t.same(await n.leftovers(), { dropIns: [], staged: [] });
  },
);

t.test(
  'a CRI-O without pinned_images (before 1.28): Pinned=Unknown, PinningUnverifiable',
  async (t) => {
    const n = await node(t, { crio: { noPinSupport: true } });
    const file = await makeBundle(n.dir, {
      key: n.keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(n.dir, 'update.bundle'),
    });
    const r = await load(n, file);
    t.equal(r.code, 0, r.stderr.slice(-400));
    const status = await n.status();
    t.equal(status.phase, 'Ready');
    t.equal(cond(status, 'Pinned')?.status, 'Unknown');
    t.equal(cond(status, 'Pinned')?.reason, 'PinningUnverifiable');
  },
);

t.test('PinFailed: a CRI-O 1.28 that applies pins only at start', async (t) => {
  const n = await node(t, { crio: { pinsAtStartOnly: true } });
  const first = await makeBundle(n.dir, {
    key: n.keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(n.dir, 'first.bundle'),
  });
  t.equal(
    (await load(n, first)).code,
    0,
    'the first load ends Ready (no image reports pins yet: unverifiable)',
  );
  t.equal(cond(await n.status(), 'Pinned')?.status, 'Unknown');
  // crio restarts (a reboot): the pins written so far now apply
  await n.crio.stop();
  n.crio = await n.startCrio({ pinsAtStartOnly: true });
  await writeFile(join(n.root, 'run/crio/pid'), String(n.crio.pid));
  await writeFile(
    n.config,
    (await readFile(n.config, 'utf8')).replace('current: "1.0.0"', 'current: "1.1.0"'),
  );
  const second = await makeBundle(n.dir, {
    key: n.keys.key,
    version: '1.2.0',
    images: [{ name: `${ORIGIN}/acme/app:v2`, files: { 'app.txt': 'app v2' } }],
    out: join(n.dir, 'second.bundle'),
  });
  const r = await load(n, second);
  t.not(r.code, 0, 'the second load fails: its images are not pinned after the reload');
  const status = await n.status();
  t.equal(cond(status, 'Failed')?.reason, 'PinFailed', cond(status, 'Failed')?.message);
  t.match(cond(status, 'Failed')?.message, /acme\/app:v2|acme\/app@/, 'names the image');
  t.same(await n.leftovers(), { dropIns: [], staged: [] });
});
