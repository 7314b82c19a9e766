// dist/bundle-deploy-VERSION.tar.gz (`pnpm package`, scripts/package.mjs buildDeploy): the cluster
// install files for an admin with no clone and no npm. Unpacked outside the repository (no
// node_modules anywhere above it), its generator runs with the Node.js the bundle CLI carries and
// writes what the repository's generator writes.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdir, readFile, readdir, symlink, writeFile, chmod } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const VERSION = JSON.parse(await readFile(join(ROOT, 'builder/package.json'), 'utf8'))
  .version as string;
const work = await tmpdir(t, 'ob-deploy-art-');

const build = (out: string) =>
  execFileSync(
    process.execPath,
    [join(ROOT, 'scripts/package.mjs'), '--only', 'deploy', '--out', out],
    { encoding: 'utf8', env: { ...process.env, SOURCE_DATE_EPOCH: '1700000000' } },
  );
const built = build(join(work, 'dist'));
const tgz = join(work, 'dist', `bundle-deploy-${VERSION}.tar.gz`);
const top = join(work, 'unpacked', `bundle-deploy-${VERSION}`);
await mkdir(join(work, 'unpacked'));
execFileSync('tar', ['-xzf', tgz, '-C', join(work, 'unpacked')]);

/** As the bundle CLI tarball installs: PREFIX/bin/bundle (a launcher) and PREFIX/lib/bundle/node (here: this Node.js). */
async function bundleCli(): Promise<string> {
  const prefix = join(work, 'prefix');
  await mkdir(join(prefix, 'bin'), { recursive: true });
  await mkdir(join(prefix, 'lib', 'bundle'), { recursive: true });
  await symlink(process.execPath, join(prefix, 'lib', 'bundle', 'node'));
  await writeFile(join(prefix, 'bin', 'bundle'), '#!/bin/sh\nexit 0\n');
  await chmod(join(prefix, 'bin', 'bundle'), 0o755);
  return join(prefix, 'bin');
}

t.test('the tarball holds every install file; built twice, the same bytes', async (t) => {
  t.match(built, /bundle-deploy-[\d.]+\.tar\.gz {2}[\d.]+ MiB/);
  t.strictSame((await readdir(top)).sort(), [
    'README.md',
    'admin-rbac.yaml',
    'crd.yaml',
    'kubernetes',
    'metrics.yaml',
    'openshift',
    'rbac.yaml',
    'systemd',
    'upgrade-gate.yaml',
  ]);
  const os = (await readdir(join(top, 'openshift'))).sort();
  for (const f of [
    'generate',
    'generate.mjs',
    'bundle-agent-bootstrap.sh',
    'bundle-agent-bootstrap.service',
    'bundle-agent-bootstrap.path',
    'bundle-agent.container',
    'config.yaml.in',
    '99-worker-bundle-agent.yaml',
    '99-worker-bundle-agent.bu',
  ])
    t.ok(os.includes(f), `openshift/${f}`);
  t.strictSame((await readdir(join(top, 'kubernetes'))).sort(), [
    'daemonset.yaml',
    'metrics-podmonitor.yaml',
    'node-config.sh',
  ]);
  for (const f of [
    'crd.yaml',
    'rbac.yaml',
    'upgrade-gate.yaml',
    'metrics.yaml',
    'kubernetes/daemonset.yaml',
    'kubernetes/metrics-podmonitor.yaml',
    'openshift/metrics-servicemonitor.yaml',
    'openshift/bundle-agent-bootstrap.sh',
  ]) {
    t.equal(
      await readFile(join(top, f), 'utf8'),
      await readFile(join(ROOT, 'deploy', f), 'utf8'),
      `${f} as in the repository`,
    );
  }
  build(join(work, 'dist2'));
  t.ok(
    (await readFile(tgz)).equals(
      await readFile(join(work, 'dist2', `bundle-deploy-${VERSION}.tar.gz`)),
    ),
    'reproducible',
  );
});

t.test(
  "openshift/generate runs with the bundle CLI's Node.js (none on PATH, no node_modules) and writes what the repository's generator writes",
  async (t) => {
    const bin = await bundleCli();
    // the one tool the launcher uses besides sh builtins
    const tools = join(work, 'tools');
    await mkdir(tools);
    await symlink('/usr/bin/readlink', join(tools, 'readlink'));
    const env = { PATH: `${bin}:${tools}` };
    t.not(spawnSync('/bin/sh', ['-c', 'command -v node'], { env }).status, 0, 'no node on PATH');
    const help = spawnSync(join(top, 'openshift', 'generate'), ['--help'], {
      encoding: 'utf8',
      env,
    });
    t.equal(help.status, 0, help.stderr);
    t.match(help.stdout, /^Usage: node deploy\/openshift\/generate\.mjs /);
    const key = join(work, 'factory.pub');
    execFileSync(process.execPath, [
      join(ROOT, 'builder/bin/bundle.js'),
      'keygen',
      '--out',
      join(work, 'factory'),
    ]);
    const shipped = join(work, 'out-shipped');
    const repo = join(work, 'out-repo');
    await mkdir(shipped);
    await mkdir(repo);
    const r = spawnSync(join(top, 'openshift', 'generate'), ['--key', key, '--out', shipped], {
      encoding: 'utf8',
      env,
    });
    t.equal(r.status, 0, r.stderr);
    t.match(r.stdout, /^wrote .*99-master-bundle-agent\.yaml/);
    execFileSync(process.execPath, [
      join(ROOT, 'deploy/openshift/generate.mjs'),
      '--key',
      key,
      '--out',
      repo,
    ]);
    for (const f of (await readdir(repo)).sort())
      t.equal(
        await readFile(join(shipped, f), 'utf8'),
        await readFile(join(repo, f), 'utf8'),
        `${f}: the same`,
      );
    const bad = spawnSync(
      join(top, 'openshift', 'generate'),
      ['--image', 'localhost/offline-bundle/bundle-agent@sha256:abc'],
      { encoding: 'utf8', env },
    );
    t.equal(bad.status, 2);
    t.match(bad.stderr, /^generate\.mjs: .* is not a digest/);
    // called through a symlink elsewhere (an admin's ~/bin/generate): generate.mjs is found beside the real file
    await mkdir(join(work, 'links'));
    await symlink(join(top, 'openshift', 'generate'), join(work, 'links', 'generate'));
    const linked = spawnSync(join(work, 'links', 'generate'), ['--help'], {
      encoding: 'utf8',
      env,
      cwd: work,
    });
    t.equal(linked.status, 0, `through a symlink: ${linked.stderr}`);
    t.match(linked.stdout, /^Usage: node deploy\/openshift\/generate\.mjs /);
    const none = spawnSync(join(top, 'openshift', 'generate'), ['--help'], {
      encoding: 'utf8',
      env: { PATH: tools },
    });
    t.equal(none.status, 127);
    t.match(none.stderr, /no Node\.js: install the bundle CLI/);
  },
);
