// containerd mode against a real containerd 1.6 (started here, as root, on its own socket
// and root, native snapshotter): hosts.toml mirror -> CRI PullImage through it from a real
// docker-registry playing the local mirror -> ImageStatus/ListImages -> pin label via ctr.
import { execFileSync, spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { mirrorPath } from '@offline-bundle/oci';
import {
  CriImageClient,
  MANAGED_MARKER,
  containerdHostDir,
  pinContainerdImages,
  setContainerdPins,
  containerdPinnedRefs,
  containerdReportsPins,
  containerdVersion,
  pullAll,
  removeContainerdHosts,
  renderContainerdHosts,
  writeContainerdHosts,
} from '@offline-bundle/runtime';
import { pushImage } from '../helpers/images.mjs';
import { startRegistry } from '../helpers/registry.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { parseToml, startContainerd } from './lib.js';

function ctr(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('ctr', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

t.test('renderContainerdHosts: hosts.toml shape', async (t) => {
  const text = renderContainerdHosts('quay.io', '127.0.0.1:5000');
  t.equal(text.split('\n')[0], MANAGED_MARKER);
  t.same(parseToml(text), {
    server: 'https://quay.io',
    host: {
      'http://127.0.0.1:5000/v2/quay.io': {
        capabilities: ['pull', 'resolve'],
        override_path: true,
      },
    },
  });
  t.same(parseToml(renderContainerdHosts('registry.example.com:5000', '127.0.0.1:5000')), {
    server: 'https://registry.example.com:5000',
    host: {
      'http://127.0.0.1:5000/v2/registry.example.com_5000': {
        capabilities: ['pull', 'resolve'],
        override_path: true,
      },
    },
  });
  t.equal(
    (parseToml(renderContainerdHosts('docker.io', '127.0.0.1:5000')) as { server: string }).server,
    'https://registry-1.docker.io',
    "docker.io's API host",
  );
  t.equal(containerdHostDir('registry.example.com:5000'), 'registry.example.com:5000');
  t.throws(() => renderContainerdHosts('quay.io/ns', '127.0.0.1:5000'), { code: 'INVALID_SPEC' });
  t.throws(() => renderContainerdHosts('quay.io', '127.0.0.1:5000/x'), { code: 'INVALID_SPEC' });
});

t.test(
  'containerdReportsPins: from 1.6.22 (pinned images backported from 1.7), not before, unknown for what it cannot read',
  async (t) => {
    for (const v of ['v1.6.22', '1.6.30', 'v1.7.0', '1.7.13', 'v2.0.2', '2.1.0~rc1'])
      t.equal(containerdReportsPins(v), true, v);
    for (const v of ['v1.6.20', '1.6.21', '1.6.20~ds1', '1.5.9-0ubuntu3'])
      t.equal(containerdReportsPins(v), false, v);
    for (const v of ['', 'dev', '1', '1.7', 'v1.x.0'])
      t.equal(containerdReportsPins(v), undefined, JSON.stringify(v));
  },
);

t.test('hosts.toml files: atomic, removes only its own', async (t) => {
  const certs = await tmpdir(t, 'ob-rt-certs-');
  const file = await writeContainerdHosts(certs, 'quay.io', '127.0.0.1:5000');
  t.equal(file, path.join(certs, 'quay.io', 'hosts.toml'));
  await writeContainerdHosts(certs, 'quay.io', '127.0.0.1:6000');
  t.match(await readFile(file, 'utf8'), /127\.0\.0\.1:6000/);
  t.same(await readdir(path.join(certs, 'quay.io')), ['hosts.toml'], 'no temp file left');

  const foreignDir = path.join(certs, 'docker.io');
  await mkdir(foreignDir);
  const foreign =
    'server = "https://registry-1.docker.io"\n\n[host."https://mirror.corp.example"]\n  capabilities = ["pull"]\n';
  await writeFile(path.join(foreignDir, 'hosts.toml'), foreign);
  await t.rejects(removeContainerdHosts(certs, 'docker.io'), { code: 'FOREIGN_FILE' });
  await t.rejects(writeContainerdHosts(certs, 'docker.io', '127.0.0.1:5000'), {
    code: 'FOREIGN_FILE',
  });
  t.equal(
    await readFile(path.join(foreignDir, 'hosts.toml'), 'utf8'),
    foreign,
    'foreign hosts.toml untouched',
  );

  t.equal(await removeContainerdHosts(certs, 'quay.io'), true);
  t.equal(await removeContainerdHosts(certs, 'quay.io'), false, 'idempotent');
  t.equal(await removeContainerdHosts(certs, 'never.written.example'), false);
  t.same(await readdir(certs), ['docker.io'], 'own host dir removed, foreign kept');
});

t.test('real containerd: pull through hosts.toml, status, list, pin, fs info', async (t) => {
  const reg = await startRegistry();
  t.teardown(() => reg.stop());
  const ctd = await startContainerd();
  t.teardown(() => ctd.stop());
  const client = new CriImageClient(ctd.socket);
  t.teardown(() => client.close());

  const app = await pushImage(
    {
      tag: 'v1',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [{ 'app.txt': 'app v1' }, { 'etc/app.conf': 'x=1' }],
        },
      ],
    },
    `${reg.host}/${mirrorPath('quay.io/ns/app')}:v1`,
  );
  // A source registry with a port: hosts dir "registry.example.com:5000", mirror path
  // "registry.example.com_5000/team/tool".
  const tool = await pushImage(
    {
      tag: 'v2',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'tool.txt': 'tool v2' }] }],
    },
    `${reg.host}/${mirrorPath('registry.example.com:5000/team/tool')}:v2`,
  );
  const appRef = `quay.io/ns/app@${app.digest}`;
  const toolRef = `registry.example.com:5000/team/tool@${tool.digest}`;
  const appId = app.manifests[0]?.config;
  const toolId = tool.manifests[0]?.config;

  await t.rejects(
    client.pullImage(appRef, { timeoutMs: 20_000 }),
    { code: 'PULL_FAILED' },
    'no hosts.toml yet: quay.io is unreachable',
  );

  await writeContainerdHosts(ctd.certsDir, 'quay.io', reg.host);
  await writeContainerdHosts(ctd.certsDir, 'registry.example.com:5000', reg.host);

  const progress: { ref: string; done: number; total: number }[] = [];
  const results = await pullAll(client, [appRef, toolRef, appRef], {
    concurrency: 2,
    retries: 1,
    backoffMs: 100,
    timeoutMs: 30_000,
    onProgress: ({ ref, done, total }) => progress.push({ ref, done, total }),
  });
  t.same(
    results,
    [
      { ref: appRef, imageRef: appId },
      { ref: toolRef, imageRef: toolId },
    ],
    'PullImage answered the image IDs (config digests)',
  );
  t.same(
    progress.map((p) => [p.done, p.total]),
    [
      [1, 2],
      [2, 2],
    ],
    'progress per image',
  );
  t.same(new Set(progress.map((p) => p.ref)), new Set([appRef, toolRef]));

  const status = await client.imageStatus(appRef);
  t.ok(status, 'ImageStatus finds the image');
  t.equal(status?.id, appId);
  t.same(status?.repoDigests, [appRef], 'repoDigests name the source repository, not the mirror');
  t.ok((status?.size ?? 0) > 0, 'size reported');
  t.equal(
    status?.pinned,
    false,
    'containerd 1.6 reports pinned: false (label stored, not honoured)',
  );
  t.equal(
    await client.imageStatus(`quay.io/ns/app@sha256:${'0'.repeat(64)}`),
    null,
    'unknown image: null',
  );

  const byTag = await client.pullImage('quay.io/ns/app:v1', { timeoutMs: 30_000 });
  t.equal(byTag, appId, 'a tag resolves through the mirror too (capability "resolve")');

  const list = await client.listImages();
  const listed = new Map(list.map((i) => [i.id, i]));
  t.same(listed.get(appId as string)?.repoDigests, [appRef]);
  t.same(listed.get(appId as string)?.repoTags, ['quay.io/ns/app:v1']);
  t.same(listed.get(toolId as string)?.repoDigests, [toolRef]);

  const pinned = await pinContainerdImages([appRef, toolRef], { address: ctd.socket });
  t.same(
    pinned,
    [appRef, 'quay.io/ns/app:v1', appId, toolRef, toolId].sort(),
    'every containerd name of each image labelled',
  );
  const ls = await ctr(['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls']);
  t.equal(ls.code, 0, ls.stderr);
  for (const name of pinned) {
    const line = ls.stdout.split('\n').find((l) => l.split(/\s+/)[0] === name) ?? '';
    t.match(
      line,
      /io\.cri-containerd\.pinned=pinned/,
      `ctr images ls shows the pin label on ${name}`,
    );
  }
  await t.rejects(
    pinContainerdImages([`quay.io/ns/none@sha256:${'1'.repeat(64)}`], { address: ctd.socket }),
    { code: 'IMAGE_NOT_FOUND' },
  );
  // containerd's own label beside ours must survive both the pin and the unpin (masked updates)
  const own = await ctr([
    '-a',
    ctd.socket,
    '-n',
    'k8s.io',
    'images',
    'label',
    toolRef,
    'site.example/keep=yes',
  ]);
  t.equal(own.code, 0, own.stderr);
  const un = await setContainerdPins([], [toolRef], { address: ctd.socket });
  t.same(un.unpinned, [toolRef, toolId].sort(), 'every name of the released image unpinned');
  t.same(
    [...(await containerdPinnedRefs({ address: ctd.socket }))].sort(),
    [appRef, 'quay.io/ns/app:v1', appId].sort(),
    'only the released image lost its pin',
  );
  const after =
    (await ctr(['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'])).stdout
      .split('\n')
      .find((l) => l.split(/\s+/)[0] === toolRef) ?? '';
  t.match(after, /site\.example\/keep=yes/, 'a label that is not ours is left alone');
  t.notMatch(
    after,
    /io\.cri-containerd\.pinned/,
    'ctr no longer shows our label on the released image',
  );

  // the agent skips waiting for pins to show on a containerd whose version says they never will
  const version = await containerdVersion(ctd.socket);
  t.match(
    execFileSync('containerd', ['--version'], { encoding: 'utf8' }),
    new RegExp(` v?${version.replace(/^v/, '').replace(/[.~+]/g, '\\$&')}( |$)`, 'm'),
    `the version containerd's API answers (${version}) is the one its binary prints`,
  );
  const reported = (await client.listImages()).some((i) => i.pinned);
  t.equal(
    containerdReportsPins(version),
    reported,
    `containerd ${version}: its CRI ${reported ? 'reports' : 'does not report'} the labelled images as pinned, as its version says`,
  );
  await t.rejects(
    containerdVersion(path.join(ctd.dir, 'no-such.sock'), 2000),
    { code: /RUNTIME_UNAVAILABLE|TIMEOUT/ },
    'version of no containerd: a runtime error',
  );

  await t.rejects(
    pinContainerdImages([appRef], { address: path.join(ctd.dir, 'no-such.sock'), timeoutMs: 2000 }),
    { code: /RUNTIME_UNAVAILABLE|TIMEOUT/ },
    'no containerd on the socket: a runtime error, not a hang',
  );
  await t.rejects(
    pinContainerdImages([appRef], { address: ctd.socket, namespace: 'other' }),
    { code: 'IMAGE_NOT_FOUND' },
    'another namespace holds none of the k8s.io images',
  );

  const fs = await client.imageFsInfo();
  t.equal(fs.imageFilesystems.length, 1, 'one image filesystem');
  t.ok(
    fs.imageFilesystems[0]?.mountpoint.startsWith(ctd.dir),
    `image fs under containerd's root: ${fs.imageFilesystems[0]?.mountpoint}`,
  );
  t.ok(Number(fs.imageFilesystems[0]?.timestamp) > 0, 'timestamp set');

  t.equal(await removeContainerdHosts(ctd.certsDir, 'quay.io'), true);
  const again = await client
    .pullImage(`quay.io/ns/app@sha256:${'2'.repeat(64)}`, { timeoutMs: 20_000 })
    .catch((e: Error & { code?: string }) => e);
  t.equal(
    (again as { code?: string }).code,
    'PULL_FAILED',
    'hosts.toml removed: back to (unreachable) quay.io',
  );
  t.notMatch((again as Error).message, /\n/, 'one-line message');

  const gone = new CriImageClient(path.join(ctd.dir, 'no-such.sock'));
  t.teardown(() => gone.close());
  const unavailable = (await gone.listImages().catch((e: unknown) => e)) as Error & {
    code?: string;
  };
  t.equal(unavailable.code, 'RUNTIME_UNAVAILABLE', 'wrong socket: RUNTIME_UNAVAILABLE');
  t.match(unavailable.message, /^list images: .*ENOENT/, unavailable.message);
  t.notMatch(unavailable.message, /Resolution note|\n/, 'one clean line');
});
