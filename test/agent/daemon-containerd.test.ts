// bundle-agent end to end in containerd mode, no mocks: the daemon watches the mount table,
// a loop-mounted ext4 "stick" with a bundle made by `bundle create` appears, and every image
// ends up in a real containerd (started here on its own socket and root, native snapshotter),
// pulled through the agent's registry via the CRI ImageService, with the pinned label set.
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CriImageClient } from '@offline-bundle/runtime';
import { AGENT, containerdNode, makeBundle, run, smallFs, stick } from './fixtures.js';
import {
  compileSchema,
  crdSchema,
  freePort,
  loadCrd,
  startFakeApi,
  writeKubeconfig,
} from '../status/lib.js';
import { parse as parseYaml } from 'yaml';

const images = [
  { name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1', 'shared.txt': 'shared' } },
  {
    name: 'registry.example.com:5000/team/tool:v2',
    files: { 'tool.txt': 'tool v2', 'shared.txt': 'shared' },
  },
];

async function node(t: any, statusYaml = '') {
  const { dir, keys, root, ctd, config } = await containerdNode(t, 'ob-agent-ctd-', statusYaml);
  const cri = new CriImageClient(ctd.socket);
  t.teardown(() => cri.close());
  const manifestOf = (file: string) =>
    JSON.parse(
      execFileSync('sh', [
        '-c',
        `zstd -dc ${JSON.stringify(file)} | tar -xO bundle.json`,
      ]).toString(),
    );
  const ctrImages = () =>
    execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' });
  return { dir, keys, root, config, ctd, cri, manifestOf, ctrImages };
}

async function waitForPhase(
  statusFile: string,
  phases: string[],
  timeoutMs: number,
  bundleFile?: RegExp | false,
): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  let last: any;
  while (Date.now() < deadline) {
    last = await readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
    const bundleOk =
      bundleFile === false || (last?.bundle && (!bundleFile || bundleFile.test(last.bundle.file)));
    if (last && phases.includes(last.phase) && bundleOk) return last;
    await sleep(200);
  }
  throw new Error(`status never reached ${phases.join('/')}: ${JSON.stringify(last)}`);
}

t.test('daemon: a stick plugged in after start is loaded into containerd and pinned', async (t) => {
  // The cluster's API server cannot run here: a recording stand-in checks the contract (SSA of the status subresource).
  const api = await startFakeApi(0, 'node-a');
  t.teardown(() => api.close());
  const port = await freePort();
  const n = await node(
    t,
    `status:\n  kubeconfig: /etc/bundle-agent/kubeconfig\n  listen: 127.0.0.1:${port}\n`,
  );
  await writeKubeconfig(join(n.root, 'etc/bundle-agent/kubeconfig'), api.port);
  const mnt = join(n.root, 'media/usb');
  const staging = join(n.dir, 'staging-stick');
  const kind = await stick(n.dir, staging, 64, t);
  const file = await makeBundle(n.dir, {
    key: n.keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(staging, 'update.bundle'),
  });
  const manifest = n.manifestOf(file);

  const daemon = spawn(process.execPath, [AGENT, 'run', '--config', n.config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  daemon.stderr.on('data', (d: Buffer) => {
    log += d;
  });
  t.teardown(() => {
    daemon.kill('SIGTERM');
  });
  const idle = await waitForPhase(
    join(n.root, 'var/lib/bundle-agent/status.json'),
    ['Idle'],
    20_000,
    false,
  );
  t.equal(idle.phase, 'Idle', 'the daemon waits for media');
  t.match(idle.message, /Waiting for a USB stick/);
  await sleep(1200);

  // A damaged bundle dropped first: reported, and the daemon keeps watching.
  const drop = join(n.root, 'var/lib/bundle-agent/drop');
  await mkdir(drop, { recursive: true });
  const damaged = await readFile(file);
  damaged[Math.floor(damaged.length / 2)] ^= 0xff;
  await writeFile(join(drop, 'damaged.bundle'), damaged);
  const failed = await waitForPhase(
    join(n.root, 'var/lib/bundle-agent/status.json'),
    ['Failed'],
    30_000,
    /damaged\.bundle$/,
  );
  t.match(failed.message, /^Failed: /, 'a damaged bundle is reported to the technician');
  t.same(
    await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []),
    [],
    'nothing of it stays staged',
  );
  t.equal(daemon.exitCode, null, 'the daemon survives it');

  // "Plug in" the stick: bind/loop-mount it under the media root (or copy into a plain dir).
  if (kind === 'loop') {
    execFileSync('mkdir', ['-p', mnt]);
    execFileSync('mount', ['--bind', staging, mnt]);
    t.teardown(() => {
      try {
        execFileSync('umount', ['-l', mnt]);
      } catch {
        /* gone */
      }
    });
  } else {
    t.comment('mount not permitted: using a watched directory instead');
    await writeFile(
      n.config,
      (await readFile(n.config, 'utf8')).replace(
        'watchDirs: [/var/lib/bundle-agent/drop]',
        'watchDirs: [/var/lib/bundle-agent/drop, /media/usb]',
      ),
    );
  }
  const status = await waitForPhase(
    join(n.root, 'var/lib/bundle-agent/status.json'),
    ['Ready', 'Failed'],
    90_000,
    /usb\/update\.bundle$/,
  );
  t.equal(status.phase, 'Ready', `Ready (log: ${log.slice(-600)})`);
  t.match(status.bundle.media, /usb/, 'status names the media');
  t.match(log, /event=media/, 'journald-style event lines');

  const listed = await n.cri.listImages();
  for (const img of manifest.images) {
    const found = listed.find((i) => i.repoDigests.includes(`${img.repository}@${img.digest}`));
    t.ok(found, `ListImages has ${img.repository}@${img.digest}`);
    const st = await n.cri.imageStatus(`${img.repository}@${img.digest}`);
    t.ok(st, 'ImageStatus answers for it');
  }
  const ls = n.ctrImages();
  for (const img of manifest.images) {
    const line = ls.split('\n').find((l) => l.startsWith(`${img.repository}@${img.digest}`));
    t.match(line ?? '', /io\.cri-containerd\.pinned=pinned/, `pinned label on ${img.repository}`);
  }
  // containerd 1.6 stores the label but its CRI reports pinned: false: the pins are not claimed
  const pinnedCond = status.conditions.find((c: { type: string }) => c.type === 'Pinned');
  const cri16 = listed.every((i) => !i.pinned);
  t.equal(
    pinnedCond?.status,
    cri16 ? 'Unknown' : 'True',
    `Pinned is ${cri16 ? 'Unknown (containerd 1.6 does not report pins)' : 'True'}`,
  );
  if (cri16) t.equal(pinnedCond?.reason, 'PinningUnverifiable');
  if (cri16)
    t.match(
      log,
      /containerd v?1\.\d+\.\S+ does not report pins through the CRI/,
      'the agent read the version and did not wait for pins that never show',
    );
  t.same(
    await readdir(join(n.root, 'etc/containerd/certs.d')),
    [],
    'hosts.toml mirrors removed once Ready',
  );
  t.same(await readdir(join(n.root, 'var/lib/upgrade')), [], 'staged layout removed');

  const statusEndpoint = await fetch(`http://127.0.0.1:${port}/status`).then(
    (r) => r.json() as Promise<any>,
  );
  t.equal(statusEndpoint.phase, 'Ready', 'GET /status on loopback');
  const metrics = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  t.match(metrics, /^bundle_agent_images_pulled_total \d+/m, 'GET /metrics in Prometheus text');
  t.match(
    await readFile(join(n.root, 'run/issue.d/bundle-agent.issue'), 'utf8'),
    /You may remove the USB stick/,
    'the console shows the technician line',
  );

  daemon.kill('SIGTERM');
  const code = await new Promise((r) => daemon.once('exit', r));
  t.ok(code === 0 || code === null, 'the daemon stops cleanly on SIGTERM');
  const sent = api
    .accepted()
    .filter(
      (r) => r.path === '/apis/bundles.offline-bundle.io/v1alpha1/nodebundlestatuses/node-a/status',
    );
  t.ok(
    sent.length > 0,
    "contract: status applied to the node's own NodeBundleStatus status subresource",
  );
  const lastSent = parseYaml(sent[sent.length - 1]!.body);
  t.equal(lastSent.status.phase, 'Ready', 'the final state reached the cluster');
  t.equal(sent[0]!.headers['content-type'], 'application/apply-patch+yaml');
  t.equal(sent[0]!.url.searchParams.get('fieldManager'), 'bundle-agent-node-a');
  // Every object the real agent sent must pass the CRD's own schema (closed: no field the API server would prune).
  const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
  for (const r of sent) {
    const body = parseYaml(r.body);
    t.ok(
      validate(body),
      `contract: ${body.status.phase} status validates against deploy/crd.yaml ${JSON.stringify(validate.errors ?? [])}`,
    );
  }
});

t.test(
  'load: too little disk to stage → served from the media through the seek index',
  async (t) => {
    const n = await node(t);
    const small = join(n.root, 'var/lib/upgrade');
    if (!smallFs(small, 64, t)) {
      t.skip('mounting a tmpfs is not permitted here');
      return;
    }
    const big = (await import('node:crypto')).randomBytes(512 * 1024);
    const file = await makeBundle(n.dir, {
      key: n.keys.key,
      version: '1.1.0',
      images: [{ name: 'quay.io/acme/big:v1', files: { 'big.bin': big } }, images[0]!],
      out: join(n.dir, 'media.bundle'),
    });
    const manifest = n.manifestOf(file);
    const r = await run(AGENT, ['load', file, '--config', n.config, '--json']);
    t.equal(r.code, 0, `load exits 0 (${r.stderr.slice(-500)})`);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    t.equal(out.mode, 'media', 'served from the media');
    t.match(r.stderr, /keep the USB stick in/);
    const listed = await n.cri.listImages();
    for (const img of manifest.images)
      t.ok(
        listed.some((i) => i.repoDigests.includes(`${img.repository}@${img.digest}`)),
        `${img.repository} pulled`,
      );
    t.same(await readdir(small), [], 'nothing written to the small upgrade dir');
  },
);

t.test(
  'load: pins follow the releases in use; an older release is unpinned once a newer one runs (containerd)',
  async (t) => {
    const n = await node(t);
    const pinnedNames = () =>
      n
        .ctrImages()
        .split('\n')
        .filter((l) => /io\.cri-containerd\.pinned=pinned/.test(l))
        .map((l) => l.split(/\s+/)[0]!);
    const release = async (version: string, current: string) => {
      await writeFile(
        n.config,
        (await readFile(n.config, 'utf8')).replace(/current: "[^"]*"/, `current: "${current}"`),
      );
      const file = await makeBundle(n.dir, {
        key: n.keys.key,
        version,
        images: [{ name: `quay.io/acme/app:v${version}`, files: { 'app.txt': `app ${version}` } }],
        out: join(n.dir, `${version}.bundle`),
      });
      const r = await run(AGENT, ['load', file, '--config', n.config]);
      t.equal(r.code, 0, `load ${version} over ${current} (${r.stderr.slice(-300)})`);
    };
    await release('1.1.0', '1.0.0');
    await release('1.2.0', '1.1.0');
    t.ok(
      pinnedNames().includes('quay.io/acme/app:v1.1.0'),
      'the running 1.1.0 stays pinned while 1.2.0 is loaded',
    );
    t.ok(pinnedNames().includes('quay.io/acme/app:v1.2.0'), '1.2.0 pinned');
    await release('1.3.0', '1.2.0');
    const pinned = pinnedNames();
    t.notOk(pinned.includes('quay.io/acme/app:v1.1.0'), '1.1.0 unpinned once 1.2.0 runs');
    t.ok(
      pinned.includes('quay.io/acme/app:v1.2.0') && pinned.includes('quay.io/acme/app:v1.3.0'),
      'the running 1.2.0 and the new 1.3.0 pinned',
    );
    t.ok(
      n.ctrImages().includes('quay.io/acme/app:v1.1.0'),
      'unpinned, not removed: garbage collection decides',
    );
    const status = JSON.parse(
      await readFile(join(n.root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.same(
      status.history.map((h: any) => h.version).filter((v: string) => v === '1.1.0'),
      [],
      'history no longer holds 1.1.0',
    );
  },
);
