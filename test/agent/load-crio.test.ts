// bundle-agent in CRI-O mode, end to end: a real bundle on a loop-mounted ext4 "stick",
// the agent's own registry, its registries.conf.d drop-in, and podman 4.3 pulling through
// that drop-in (the containers/image code CRI-O uses). CRI-O itself cannot run here, so the
// pins drop-in is checked against crio.conf(5)'s documented shape.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { copyFile, readdir, readFile, mkdir, writeFile, readFile as rf } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { tmpdir } from '../helpers/tmp.mjs';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { AGENT, keygen, makeBundle, nodeRoot, run, smallFs, stick } from './fixtures.js';
import { until } from '../helpers/until.js';

const parseToml = (
  createRequire(new URL('../../packages/runtime/package.json', import.meta.url))('smol-toml') as {
    parse: (s: string) => Record<string, any>;
  }
).parse;

const images = [
  { name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } },
  { name: 'quay.io/acme/tool:v2', files: { 'tool.txt': 'tool v2', 'shared.txt': 'shared' } },
];

async function setup(t: any, extra = '') {
  const dir = await tmpdir(t, 'ob-agent-crio-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const home = join(root, 'home');
  const podmanRoot = join(dir, 'podman');
  await mkdir(join(home, '.config/containers/registries.conf.d'), { recursive: true });
  const registriesConf = join(dir, 'registries.conf');
  await writeFile(registriesConf, 'unqualified-search-registries = []\n');
  const pull = [
    'podman',
    '--root',
    join(podmanRoot, 'root'),
    '--runroot',
    join(podmanRoot, 'run'),
    '--storage-driver',
    'vfs',
    '--events-backend',
    'none',
    'pull',
    '--quiet',
  ];
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: crio
version:
  current: "1.0.0"
paths:
  # podman 4.3 reads drop-ins from $HOME/.config/containers/registries.conf.d when CONTAINERS_REGISTRIES_CONF is set
  registriesDropInDir: /home/.config/containers/registries.conf.d
space:
  reserveBytes: 0
preload:
  method: command
  command: [${pull.map((a) => JSON.stringify(a)).join(', ')}]
reload:
  command: [touch, ${JSON.stringify(join(dir, 'reloaded'))}]
${extra}`,
  );
  const env = { ...process.env, HOME: home, CONTAINERS_REGISTRIES_CONF: registriesConf };
  const podmanImages = () =>
    JSON.parse(
      execFileSync(
        'podman',
        [
          '--root',
          join(podmanRoot, 'root'),
          '--runroot',
          join(podmanRoot, 'run'),
          '--storage-driver',
          'vfs',
          '--events-backend',
          'none',
          'images',
          '--digests',
          '--format',
          'json',
        ],
        { env },
      ).toString(),
    ) as { Names?: string[]; Digest: string; RepoDigests?: string[] }[];
  return {
    dir,
    keys,
    root,
    config,
    env,
    podmanImages,
    registriesDir: join(home, '.config/containers/registries.conf.d'),
  };
}

t.test(
  'load: from a loop-mounted stick to pulled and pinned images (CRI-O mode, podman as the containers/image client)',
  async (t) => {
    const s = await setup(t);
    const mnt = join(s.root, 'media/usb');
    const kind = await stick(s.dir, mnt, 64, t);
    t.comment(`stick: ${kind}`);
    await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(mnt, 'update.bundle'),
    });

    const r = await run(
      AGENT,
      ['load', join(mnt, 'update.bundle'), '--config', s.config, '--json'],
      s.env,
    );
    t.equal(r.code, 0, `load exits 0 (stderr: ${r.stderr.slice(-400)})`);
    const result = JSON.parse(r.stdout.trim().split('\n').pop()!);
    t.equal(result.ready, true);
    t.equal(result.mode, 'staged');

    const manifest = JSON.parse(
      execFileSync('sh', [
        '-c',
        `zstd -dc ${JSON.stringify(join(mnt, 'update.bundle'))} | tar -xO bundle.json`,
      ]).toString(),
    );
    const pulled = s.podmanImages();
    for (const img of manifest.images) {
      const found = pulled.find(
        (p) =>
          (p.RepoDigests ?? []).some((d) => d === `${img.repository}@${img.digest}`) ||
          p.Digest === img.digest,
      );
      t.ok(found, `${img.repository}@${img.digest} is in the store under its original name`);
    }

    const pins = parseToml(
      await readFile(join(s.root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'), 'utf8'),
    );
    t.same(
      Object.keys(pins),
      ['crio'],
      'contract: crio.conf(5) pins drop-in has only a [crio.image] table',
    );
    t.same(Object.keys(pins.crio), ['image']);
    const pinned: string[] = pins.crio.image.pinned_images;
    for (const img of manifest.images) {
      t.ok(
        pinned.includes(`${img.repository}@${img.digest}`),
        `pinned by digest: ${img.repository}`,
      );
      t.ok(
        pinned.includes(`${img.repository}:${img.tag}`),
        `pinned by tag: ${img.repository}:${img.tag}`,
      );
    }
    await t.resolves(rf(join(s.dir, 'reloaded')), 'the reload command ran');

    t.same(await readdir(s.registriesDir), [], 'the mirror drop-in is removed once Ready');
    t.same(
      await readdir(join(s.root, 'var/lib/upgrade')),
      [],
      'staged layout deleted (staging.keep: false), no partial left',
    );
    const status = JSON.parse(
      await readFile(join(s.root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.equal(status.phase, 'Ready');
    for (const c of [
      'MediaDetected',
      'Verified',
      'SpaceAvailable',
      'Staged',
      'Preloaded',
      'Ready',
    ]) {
      t.equal(status.conditions.find((x: any) => x.type === c)?.status, 'True', `condition ${c}`);
    }
    // podman pulls here and no CRI socket answers: nothing can report pins, so they are not claimed
    const pinnedCond = status.conditions.find((x: any) => x.type === 'Pinned');
    t.equal(
      pinnedCond?.status,
      'Unknown',
      'Pinned is Unknown where the runtime cannot report pins',
    );
    t.equal(pinnedCond?.reason, 'PinningUnverifiable');
    // CRI-O reads drop-ins only on reload: the event log shows each file change followed by one
    const events = r.stderr
      .split('\n')
      .map((l) => /event=(\w+)/.exec(l)?.[1])
      .filter((e) => e && ['mirror', 'reload', 'preload', 'unmirror', 'pin'].includes(e));
    const order = events.filter((e, i) => e !== events[i - 1]);
    t.same(
      order,
      ['mirror', 'reload', 'preload', 'unmirror', 'pin', 'reload'],
      'drop-in, reload, pulls, drop-in removed, pins, reload',
    );
    t.match(status.message, /You may remove the USB stick/);
    const st = await run(AGENT, ['status', '--config', s.config], s.env);
    t.match(
      st.stdout,
      /You may remove the USB stick/,
      'bundle-agent status speaks to the technician',
    );

    // A second release keeps the running one pinned next to it.
    await writeFile(
      s.config,
      (await readFile(s.config, 'utf8')).replace('current: "1.0.0"', 'current: "1.1.0"'),
    );
    await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.2.0',
      images: [{ name: 'quay.io/acme/app:v2', files: { 'app.txt': 'app v2' } }],
      out: join(mnt, 'next.bundle'),
    });
    const r2 = await run(AGENT, ['load', join(mnt, 'next.bundle'), '--config', s.config], s.env);
    t.equal(r2.code, 0, `second load exits 0 (${r2.stderr.slice(-300)})`);
    const pins2: string[] = parseToml(
      await readFile(join(s.root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'), 'utf8'),
    ).crio.image.pinned_images;
    t.ok(pins2.includes('quay.io/acme/app:v2'), 'new release pinned');
    t.ok(
      pins2.includes('quay.io/acme/app:v1') && pins2.includes('quay.io/acme/tool:v2'),
      'running release 1.1.0 stays pinned',
    );
  },
);

t.test('refusals leave nothing staged and no drop-ins', async (t) => {
  const cases: {
    name: string;
    reason: string;
    prepare: (s: Awaited<ReturnType<typeof setup>>) => Promise<string>;
  }[] = [
    {
      name: 'bad signature (signed by another key)',
      reason: 'UntrustedKey',
      prepare: async (s) => {
        const other = await keygen(s.dir, 'other');
        return makeBundle(s.dir, {
          key: other.key,
          version: '1.1.0',
          images,
          out: join(s.dir, 'other.bundle'),
        });
      },
    },
    {
      name: 'wrong architecture',
      reason: 'WrongArch',
      prepare: (s) =>
        makeBundle(s.dir, {
          key: s.keys.key,
          version: '1.1.0',
          arch: 'arm64',
          images,
          out: join(s.dir, 'arm.bundle'),
        }),
    },
    {
      name: 'downgrade',
      reason: 'Downgrade',
      prepare: (s) =>
        makeBundle(s.dir, {
          key: s.keys.key,
          version: '0.9.0',
          images,
          out: join(s.dir, 'old.bundle'),
        }),
    },
    {
      name: 'running version unknown (no version.current, no version.allowUnknown)',
      reason: 'UnknownRunningVersion',
      prepare: async (s) => {
        await writeFile(
          s.config,
          (await readFile(s.config, 'utf8')).replace('  current: "1.0.0"\n', ''),
        );
        return makeBundle(s.dir, {
          key: s.keys.key,
          version: '1.1.0',
          images,
          out: join(s.dir, 'unknown.bundle'),
        });
      },
    },
    {
      name: 'running version not an accepted source',
      reason: 'NotAnUpgradeSource',
      prepare: (s) =>
        makeBundle(s.dir, {
          key: s.keys.key,
          version: '2.0.0',
          upgradeFrom: ['1.9.0'],
          images,
          out: join(s.dir, 'far.bundle'),
        }),
    },
    {
      name: 'tampered archive (a flipped byte in a blob)',
      reason: 'Corrupt',
      prepare: async (s) => {
        const f = await makeBundle(s.dir, {
          key: s.keys.key,
          version: '1.1.0',
          images,
          out: join(s.dir, 'tampered.bundle'),
        });
        const buf = await readFile(f);
        buf[buf.length - 200] ^= 0xff;
        await writeFile(f, buf);
        return f;
      },
    },
  ];
  for (const c of cases) {
    t.test(c.name, async (t) => {
      const s = await setup(t);
      const file = await c.prepare(s);
      const r = await run(AGENT, ['load', file, '--config', s.config, '--json'], s.env);
      t.not(r.code, 0, 'load fails');
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      if (c.reason === 'Corrupt')
        t.not(out.error.reason, 'Internal', `a specific reason (${out.error.reason})`);
      else t.equal(out.error.reason, c.reason);
      t.match(r.stderr, new RegExp(`bundle-agent: ${out.error.reason}: `));
      const status = JSON.parse(
        await readFile(join(s.root, 'var/lib/bundle-agent/status.json'), 'utf8'),
      );
      t.equal(status.phase, 'Failed');
      t.equal(status.conditions.find((x: any) => x.type === 'Failed')?.reason, out.error.reason);
      t.same(await readdir(join(s.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
      t.same(await readdir(s.registriesDir), [], 'no mirror drop-in');
      t.same(
        await readdir(join(s.root, 'etc/crio/crio.conf.d')).catch(() => []),
        [],
        'no pins written',
      );
      t.same(s.podmanImages(), [], 'nothing pulled');
    });
  }

  t.test('wrong expected digest', async (t) => {
    const s = await setup(t);
    await writeFile(
      s.config,
      (await readFile(s.config, 'utf8')).replace(
        'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n',
        `trust:\n  digest: sha256:${'0'.repeat(64)}\n`,
      ),
    );
    const f = await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.1.0',
      images,
      out: join(s.dir, 'd.bundle'),
    });
    const r = await run(AGENT, ['load', f, '--config', s.config, '--json'], s.env);
    t.not(r.code, 0);
    t.equal(JSON.parse(r.stdout.trim().split('\n').pop()!).error.reason, 'DigestMismatch');
    t.same(await readdir(join(s.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
    t.same(await readdir(s.registriesDir), []);
  });

  t.test(
    'not enough space (a small tmpfs holds the upgrade dir and the image store)',
    async (t) => {
      const s = await setup(t);
      const small = join(s.root, 'var/lib/small');
      if (!smallFs(small, 512, t)) {
        t.skip('mounting a tmpfs is not permitted here');
        return;
      }
      await writeFile(
        s.config,
        (await readFile(s.config, 'utf8')).replace(
          'paths:\n',
          'paths:\n  upgradeDir: /var/lib/small/upgrade\n  imageStoreDir: /var/lib/small/store\n',
        ),
      );
      const big = (await import('node:crypto')).randomBytes(2 * 1024 * 1024);
      const f = await makeBundle(s.dir, {
        key: s.keys.key,
        version: '1.1.0',
        images: [{ name: 'quay.io/acme/big:v1', files: { 'big.bin': big } }],
        out: join(s.dir, 'big.bundle'),
      });
      const r = await run(AGENT, ['load', f, '--config', s.config, '--json'], s.env);
      t.not(r.code, 0);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      t.equal(out.error.reason, 'InsufficientSpace');
      t.match(out.error.message, /free [\d.]+ (B|KB|MB|GB)/, 'names the bytes missing');
      t.same(await readdir(join(small, 'upgrade')).catch(() => []), [], 'nothing staged');
      t.same(await readdir(s.registriesDir), []);
    },
  );
});

void copyFile;

t.test('SIGTERM during a load, and a second load meanwhile', async (t) => {
  const s = await setup(t);
  // a pre-loader that hangs, so the load is caught mid-way
  await writeFile(
    s.config,
    (await readFile(s.config, 'utf8')).replace(
      / {2}command: \[.*\]\n/,
      '  command: [sh, -c, "sleep 60", sh]\n',
    ),
  );
  const file = await makeBundle(s.dir, {
    key: s.keys.key,
    version: '1.1.0',
    images,
    out: join(s.dir, 'slow.bundle'),
  });
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, [AGENT, 'load', file, '--config', s.config, '--json'], {
    env: s.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const statusFile = join(s.root, 'var/lib/bundle-agent/status.json');
  await until(
    'the load pre-loading',
    async () =>
      (await readFile(statusFile, 'utf8').then(JSON.parse, () => undefined))?.phase ===
      'Preloading',
    { timeoutMs: 30_000, stepMs: 50 },
  );
  t.equal(
    JSON.parse(await readFile(statusFile, 'utf8')).phase,
    'Preloading',
    'caught while pre-loading',
  );
  t.equal((await readdir(s.registriesDir)).length, 1, 'the mirror drop-in is in place meanwhile');

  const second = await run(AGENT, ['load', file, '--config', s.config, '--json'], s.env);
  t.equal(second.code, 1, 'a second load is refused while one runs');
  t.equal(JSON.parse(second.stdout.trim().split('\n').pop()!).error.reason, 'Busy');
  t.equal((await readdir(s.registriesDir)).length, 1, 'and leaves the running load alone');

  child.kill('SIGTERM');
  t.equal(await exited, 1, 'the interrupted load exits 1');
  t.equal(JSON.parse(out.trim().split('\n').pop()!).error.reason, 'Interrupted');
  t.same(await readdir(s.registriesDir), [], 'mirror drop-in removed');
  t.same(
    await readdir(join(s.root, 'var/lib/upgrade')),
    ['1.1.0-amd64.partial'],
    'the staged layout put back as a marked partial staging, which the next load resumes',
  );
  const status = JSON.parse(await readFile(statusFile, 'utf8'));
  t.equal(status.phase, 'Failed');
  t.equal(status.conditions.find((c: any) => c.type === 'Failed')?.reason, 'Interrupted');
  t.notMatch(status.message, /You may remove/, 'the technician is not told all is well');
  await t.rejects(readFile(join(s.root, 'var/lib/bundle-agent/load.lock')), 'the lock is released');
});

t.test(
  "pins: another file's pins are kept in ours; an unreadable one stops the load",
  async (t) => {
    const s = await setup(t);
    const crioD = join(s.root, 'etc/crio/crio.conf.d');
    await mkdir(crioD, { recursive: true });
    const pause = `quay.io/openshift/pause@sha256:${'a'.repeat(64)}`;
    await writeFile(
      join(crioD, '01-installer.conf'),
      `[crio.image]\npinned_images = ["${pause}"]\n`,
    );
    await writeFile(
      join(s.root, 'etc/crio/crio.conf'),
      `[crio.image]\npinned_images = ["registry.k8s.io/pause:3.9"]\n`,
    );
    const file = await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.1.0',
      images,
      out: join(s.dir, 'p.bundle'),
    });
    const r = await run(AGENT, ['load', file, '--config', s.config], s.env);
    t.equal(r.code, 0, r.stderr.slice(-300));
    const ours: string[] = parseToml(
      await readFile(join(crioD, 'offline-bundle-pins.conf'), 'utf8'),
    ).crio.image.pinned_images;
    t.ok(
      ours.includes(pause),
      "the installer's pin is carried in ours (CRI-O takes the last file's list)",
    );
    t.ok(ours.includes('registry.k8s.io/pause:3.9'), "and crio.conf's");
    t.equal(
      await readFile(join(crioD, '01-installer.conf'), 'utf8'),
      `[crio.image]\npinned_images = ["${pause}"]\n`,
      'their file is untouched',
    );

    await writeFile(join(crioD, '02-broken.conf'), '[crio.image\npinned_images = [');
    const r2 = await run(AGENT, ['load', file, '--config', s.config, '--json'], s.env);
    t.equal(r2.code, 1);
    t.equal(JSON.parse(r2.stdout.trim().split('\n').pop()!).error.reason, 'PinFailed');
    t.same(await readdir(s.registriesDir), [], 'no mirror drop-in left');
  },
);

t.test(
  "the running version read from OpenShift's ClusterVersion (contract: the RBAC-enforcing API stand-in, as the node)",
  async (t) => {
    const clusterVersion = '1.5.0';
    const api = await startKubeStandIn();
    t.teardown(() => api.close());
    api.clusterVersion = {
      apiVersion: 'config.openshift.io/v1',
      kind: 'ClusterVersion',
      metadata: { name: 'version' },
      status: {
        history: [
          { state: 'Partial', version: '9.9.9' },
          { state: 'Completed', version: clusterVersion },
          { state: 'Completed', version: '1.0.0' },
        ],
      },
    };
    const seen = api.requests;
    const s = await setup(t, `status:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n`);
    await api.writeNodeKubeconfig(s.root, 'node-a', { certPaths: 'root' });
    await writeFile(
      s.config,
      (await readFile(s.config, 'utf8')).replace('  current: "1.0.0"\n', '  fromCluster: true\n'),
    );

    const older = await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.4.0',
      images,
      out: join(s.dir, 'older.bundle'),
    });
    const r = await run(AGENT, ['load', older, '--config', s.config, '--json'], s.env);
    t.equal(
      JSON.parse(r.stdout.trim().split('\n').pop()!).error.reason,
      'Downgrade',
      'the cluster runs 1.5.0 (newest Completed entry): 1.4.0 is a downgrade',
    );
    t.ok(
      seen.some(
        (r) =>
          r.method === 'GET' &&
          r.path === '/apis/config.openshift.io/v1/clusterversions/version' &&
          r.status === 200 &&
          r.user === 'system:node:node-a',
      ),
      'read ClusterVersion "version" as the node',
    );

    await api.pause();
    const again = await run(AGENT, ['load', older, '--config', s.config, '--json'], s.env);
    t.equal(
      JSON.parse(again.stdout.trim().split('\n').pop()!).error.reason,
      'Downgrade',
      'API server gone: the last version seen (1.5.0) still guards',
    );
    t.match(again.stderr, /cannot read the running version from the cluster/);
  },
);

t.test(
  'pre-loading by command goes through the same loop: a full image store stops it at once',
  async (t) => {
    const s = await setup(t);
    const calls = join(s.dir, 'calls');
    await writeFile(
      s.config,
      (await readFile(s.config, 'utf8')).replace(
        / {2}command: \[.*\]\n/,
        `  command: [sh, -c, 'echo "$1" >> ${calls}; echo "writing blob: no space left on device" >&2; exit 1', sh]\n  concurrency: 1\n`,
      ),
    );
    const file = await makeBundle(s.dir, {
      key: s.keys.key,
      version: '1.1.0',
      images,
      out: join(s.dir, 'full.bundle'),
    });
    const r = await run(AGENT, ['load', file, '--config', s.config, '--json'], s.env);
    t.equal(r.code, 1);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    t.equal(out.error.reason, 'NoSpaceInImageStore');
    t.match(out.error.message, /no space left on device/);
    t.equal(
      (await readFile(calls, 'utf8')).trim().split('\n').length,
      1,
      'no retry and no further image after no-space',
    );
    t.same(await readdir(s.registriesDir), [], 'no mirror drop-in left');
  },
);
