// The shipped artifacts, built once by `scripts/package.mjs` into a temp dir, used as a node
// would: the agent tarball unpacked to a prefix and the OCI image unpacked to a rootfs run with
// no Node.js from the host (a PATH without node, and a chroot), and each does a full
// `bundle-agent load` into a real containerd. The arm64 artifacts run under qemu-aarch64 with
// the arm64 image's rootfs as their sysroot (no binfmt_misc here, so qemu is called explicitly).
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { CriImageClient } from '@offline-bundle/runtime';
import { tmpdir } from '../helpers/tmp.mjs';
import { runCaptured, type Run } from '../helpers/run-captured.js';
import { startContainerd } from '../runtime/lib.js';
import { keygen, makeBundle, nodeRoot } from '../agent/fixtures.js';
import { startFakeApi, writeKubeconfig } from '../status/lib.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const VERSION = JSON.parse(await readFile(join(ROOT, 'agent/package.json'), 'utf8'))
  .version as string;
const images = [
  { name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1', 'shared.txt': 'shared' } },
  {
    name: 'registry.example.com:5000/team/tool:v2',
    files: { 'tool.txt': 'tool v2', 'shared.txt': 'shared' },
  },
];

function sh(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 180_000,
): Promise<Run> {
  // env -i: exactly `env`, not the NODE_OPTIONS tap's process tracking adds to children.
  const vars = Object.entries(env)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  return runCaptured('/usr/bin/env', ['-i', ...vars, cmd, ...args], { timeout: timeoutMs });
}

// Building the artifacts (both architectures; the arm64 addon's cross build is cached in
// ~/.cache/offline-bundle/addons after the first run) takes 3-8 min on 2 busy cores: more than
// .taprc's 300 s per file would allow for build plus two loads, so this file asks for 20 min.
t.setTimeout(1_200_000);
const work = await tmpdir(t, 'ob-pkg-');
const out = join(work, 'dist');
const built = await sh(
  process.execPath,
  [join(ROOT, 'scripts/package.mjs'), '--out', out],
  { PATH: process.env.PATH, HOME: process.env.HOME },
  900_000,
);
if (built.code !== 0) throw new Error(`package.mjs failed: ${built.stderr}`);
const agentTgz = join(out, `bundle-agent-${VERSION}-linux-amd64.tar.gz`);
const builderTgz = join(out, `bundle-${VERSION}-linux-amd64.tar.gz`);
const agentArmTgz = join(out, `bundle-agent-${VERSION}-linux-arm64.tar.gz`);
const builderArmTgz = join(out, `bundle-${VERSION}-linux-arm64.tar.gz`);
const ociTar = join(out, `bundle-agent-${VERSION}.oci.tar`);

/** A PATH with the one tool used (readlink, by the launcher): no node, and no ctr (pins use containerd's API). */
async function pathWithoutNode(dir: string): Promise<string> {
  const bin = join(dir, 'tools');
  await mkdir(bin, { recursive: true });
  for (const tool of ['readlink']) await symlink(`/usr/bin/${tool}`, join(bin, tool));
  const PATH = `${bin}:/usr/sbin:/sbin`;
  const probe = await sh('/bin/sh', ['-c', 'command -v node'], { PATH });
  t.not(probe.code, 0, `no node on PATH=${PATH}`);
  return PATH;
}

t.test('artifacts: sizes and layout', async (t) => {
  const mib = (f: string) =>
    Number(execFileSync('stat', ['-c', '%s', f], { encoding: 'utf8' })) / 1048576;
  for (const f of [agentTgz, builderTgz, agentArmTgz, builderArmTgz, ociTar])
    t.ok(existsSync(f), `${f.split('/').pop()} written (${mib(f).toFixed(1)} MiB)`);
  t.ok(mib(agentTgz) <= 60, 'agent tarball within 60 MiB');
  t.ok(mib(agentArmTgz) <= 60, 'arm64 agent tarball within 60 MiB');
  // one archive, both platforms: the index tagged VERSION, and each image tagged VERSION-ARCH
  const index = JSON.parse(
    execFileSync('tar', ['-xOf', ociTar, 'index.json'], { encoding: 'utf8' }),
  );
  t.same(
    index.manifests.map(
      (m: { annotations: Record<string, string> }) =>
        m.annotations['org.opencontainers.image.ref.name'],
    ),
    [VERSION, `${VERSION}-amd64`, `${VERSION}-arm64`],
    'index.json names',
  );
  const raw = JSON.parse(
    execFileSync('skopeo', ['inspect', '--raw', `oci-archive:${ociTar}:${VERSION}`], {
      encoding: 'utf8',
    }),
  );
  t.same(
    raw.manifests.map((m: { platform: { architecture: string } }) => m.platform.architecture),
    ['amd64', 'arm64'],
    'skopeo reads the image index: amd64 and arm64',
  );
  const list = execFileSync('tar', ['-tzf', agentTgz], {
    encoding: 'utf8',
    maxBuffer: 1 << 24,
  }).split('\n');
  const top = `bundle-agent-${VERSION}-linux-amd64/`;
  for (const p of [
    'bin/bundle-agent',
    'lib/bundle-agent/node',
    'lib/bundle-agent/app/cli.mjs',
    'lib/bundle-agent/proto/cri-image.proto',
    'lib/bundle-agent/proto/containerd-images.proto',
    'lib/bundle-agent/proto/containerd-version.proto',
    'lib/bundle-agent/node_modules/zstd-napi/binding.node',
    'share/doc/bundle-agent/THIRD-PARTY-LICENSES',
    'share/bundle-agent/bundle-agent.service',
    'install.sh',
  ]) {
    t.ok(list.includes(top + p), `tarball has ${p}`);
  }
  t.notOk(
    list.some((p) => /usb-detection|node_modules\/@kubernetes/.test(p)),
    'no usb-detection, no unbundled Kubernetes client',
  );
  const blist = execFileSync('tar', ['-tzf', builderTgz], {
    encoding: 'utf8',
    maxBuffer: 1 << 24,
  }).split('\n');
  t.ok(
    blist.includes(`bundle-${VERSION}-linux-amd64/share/bash-completion/completions/bundle`),
    'builder tarball ships bash completion',
  );
  t.ok(list.includes(`${top}share/man/man8/bundle-agent.8`), 'agent tarball ships bundle-agent(8)');
  t.ok(
    blist.includes(`bundle-${VERSION}-linux-amd64/share/man/man1/bundle.1`),
    'builder tarball ships bundle(1)',
  );
  t.ok(
    blist.includes(`bundle-${VERSION}-linux-amd64/install.sh`),
    'builder tarball ships install.sh',
  );
  const alist = execFileSync('tar', ['-tzf', agentArmTgz], {
    encoding: 'utf8',
    maxBuffer: 1 << 24,
  }).split('\n');
  t.same(
    alist.map((p) => p.replace('-linux-arm64/', '-linux-amd64/')).sort(),
    [...list].sort(),
    'the arm64 agent tarball has the same files',
  );
});

t.test(
  'agent tarball: runs from a prefix with no node on PATH, installs, and loads into containerd',
  async (t) => {
    const dir = await tmpdir(t, 'ob-pkg-tgz-');
    const prefix = join(dir, 'opt', 'offline');
    await mkdir(prefix, { recursive: true });
    execFileSync('tar', ['-xzf', agentTgz, '-C', prefix, '--strip-components=1']);
    execFileSync('tar', ['-xzf', builderTgz, '-C', prefix, '--strip-components=1']);
    const PATH = await pathWithoutNode(dir);
    const env = { PATH };
    const v = await sh(join(prefix, 'bin/bundle-agent'), ['--version'], env);
    t.equal(v.stdout.trim(), VERSION, `bundle-agent --version (${v.stderr})`);
    t.equal(
      (await sh(join(prefix, 'bin/bundle'), ['--version'], env)).stdout.trim(),
      VERSION,
      'bundle --version',
    );
    // Through a symlink on PATH, as install puts it.
    await mkdir(join(dir, 'usrbin'));
    await symlink(join(prefix, 'bin/bundle-agent'), join(dir, 'usrbin/bundle-agent'));
    t.equal(
      (
        await sh('bundle-agent', ['--version'], { PATH: `${join(dir, 'usrbin')}:${PATH}` })
      ).stdout.trim(),
      VERSION,
      'runs through a symlink',
    );

    // install.sh --root: files where systemd, tmpfiles and udev look, the unit pointing at the prefix.
    const sysroot = join(dir, 'sysroot');
    const inst = await sh(
      join(prefix, 'install.sh'),
      ['--prefix', '/usr/local', '--root', sysroot, '--runtime', 'containerd'],
      { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    );
    t.equal(inst.code, 0, `install.sh (${inst.stderr})`);
    const unit = await readFile(join(sysroot, 'etc/systemd/system/bundle-agent.service'), 'utf8');
    t.match(unit, /^ExecStart=\/usr\/local\/bin\/bundle-agent run/m);
    t.match(
      await readFile(
        join(sysroot, 'etc/systemd/system/bundle-agent.service.d/runtime.conf'),
        'utf8',
      ),
      /Wants=containerd\.service/,
    );
    t.notMatch(
      unit +
        (await readFile(
          join(sysroot, 'etc/systemd/system/bundle-agent.service.d/runtime.conf'),
          'utf8',
        )),
      /^Wants=crio/m,
      'no Wants=crio.service on a containerd node',
    );
    for (const f of [
      'etc/tmpfiles.d/bundle-agent.conf',
      'etc/udev/rules.d/99-bundle-agent-media.rules',
      'etc/bundle-agent/config.yaml',
      'usr/local/lib/bundle-agent/node',
      'usr/local/share/doc/bundle-agent/README.md',
      'usr/local/share/doc/bundle-agent/docs/install.md',
      'usr/local/share/man/man8/bundle-agent.8',
      'usr/local/share/bash-completion/completions/bundle-agent',
      'usr/local/share/zsh/site-functions/_bundle-agent',
      'usr/local/share/fish/vendor_completions.d/bundle-agent.fish',
    ]) {
      t.ok(existsSync(join(sysroot, f)), `installed ${f}`);
    }
    t.match(
      await readFile(join(sysroot, 'etc/bundle-agent/config.yaml'), 'utf8'),
      /^runtime: containerd$/m,
      'config for containerd',
    );
    t.equal(
      (await sh(join(sysroot, 'usr/local/bin/bundle-agent'), ['--version'], env)).stdout.trim(),
      VERSION,
      'the installed copy runs',
    );
    // The builder's tarball installs the same way: program, man page, completion, no service.
    const bdir = join(dir, 'builder');
    await mkdir(bdir);
    execFileSync('tar', ['-xzf', builderTgz, '-C', bdir, '--strip-components=1']);
    const binst = await sh(
      join(bdir, 'install.sh'),
      ['--prefix', '/opt/factory', '--root', sysroot],
      { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    );
    t.equal(binst.code, 0, `builder install.sh (${binst.stderr})`);
    for (const f of [
      'bin/bundle',
      'lib/bundle/node',
      'share/man/man1/bundle.1',
      'share/bash-completion/completions/bundle',
      'share/zsh/site-functions/_bundle',
      'share/fish/vendor_completions.d/bundle.fish',
      'share/doc/bundle/README.md',
      'share/doc/bundle/docs/factory.md',
    ]) {
      t.ok(existsSync(join(sysroot, 'opt/factory', f)), `builder installed ${f}`);
    }
    t.equal(
      (await sh(join(sysroot, 'opt/factory/bin/bundle'), ['--version'], env)).stdout.trim(),
      VERSION,
      'the installed builder runs',
    );
    // the Node flags measured in docs/benchmarks.md (the old generation's start) are the ones the
    // launchers pass, written out here so that changing one is a decision this test is told of
    // (the bundled node accepted them: --version above ran through each launcher)
    for (const [name, launcher, flags] of [
      [
        'bundle',
        join(sysroot, 'opt/factory/bin/bundle'),
        '--max-semi-space-size=2 --initial-old-space-size=48',
      ],
      ['bundle-agent', join(sysroot, 'usr/local/bin/bundle-agent'), '--initial-old-space-size=96'],
    ] as const) {
      const exec = (await readFile(launcher, 'utf8'))
        .split('\n')
        .find((l) => l.startsWith('exec '));
      t.equal(
        exec?.match(/\/node" (.*)"\$prefix/)?.[1]?.trim() ?? '',
        flags,
        `${name}'s launcher passes node ${flags}`,
      );
    }

    // A full load, with the cluster reporter on (the lazily loaded Kubernetes client chunk).
    const api = await startFakeApi(0, 'node-a');
    t.teardown(() => api.close());
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const ctd = await startContainerd(30_000, {
      certsDir: join(root, 'etc/containerd/certs.d'),
      socket: join(root, 'run/containerd/containerd.sock'),
    });
    t.teardown(() => ctd.stop());
    const config = await nodeRoot(
      root,
      keys.pub,
      'runtime: containerd\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\nstatus:\n  kubeconfig: /etc/bundle-agent/kubeconfig\n',
    );
    await writeKubeconfig(join(root, 'etc/bundle-agent/kubeconfig'), api.port);
    // made by the packaged builder: its one-pass writer hashes the file on a worker thread, whose code must survive the bundling
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'update.bundle'),
      create: (args) => sh(join(prefix, 'bin/bundle'), args, env),
    });
    const r = await sh(join(prefix, 'bin/bundle-agent'), ['load', file, '--config', config], env);
    t.equal(r.code, 0, `load exits 0 (${r.stderr.slice(-800)})`);
    const cri = new CriImageClient(ctd.socket);
    t.teardown(() => cri.close());
    const listed = await cri.listImages();
    for (const img of images)
      t.ok(
        listed.some((i) => i.repoTags.includes(img.name)),
        `containerd has ${img.name}`,
      );
    t.match(
      execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' }),
      /io\.cri-containerd\.pinned=pinned/,
      'pinned by the packaged agent with no ctr on its PATH (its containerd .proto shipped)',
    );
    const sent = api.accepted().filter((q) => q.path.endsWith('/nodebundlestatuses/node-a/status'));
    t.ok(sent.length > 0, 'the Kubernetes client (a lazily loaded chunk) reported the status');
    const status = await sh(join(prefix, 'bin/bundle-agent'), ['status', '--config', config], env);
    t.match(status.stdout, /You may remove the USB stick/, 'bundle-agent status');

    // The daemon (as the unit runs it) stays up waiting for media and stops on SIGTERM; the
    // launcher execs node, so the signal reaches it.
    const d = spawn(
      '/usr/bin/env',
      ['-i', `PATH=${PATH}`, join(prefix, 'bin/bundle-agent'), 'run', '--config', config],
      { stdio: 'ignore' },
    );
    await new Promise((r) => setTimeout(r, 4000));
    t.equal(d.exitCode, null, 'bundle-agent run is still running after 4 s');
    const exit = new Promise((r) => d.once('exit', (c, sig) => r(c ?? sig)));
    d.kill('SIGTERM');
    t.ok([0, 'SIGTERM'].includes((await exit) as number | string), 'and stops on SIGTERM');
  },
);

t.test(
  'OCI image: skopeo reads it; unpacked to a rootfs it runs under chroot and loads into containerd',
  async (t) => {
    const dir = await tmpdir(t, 'ob-pkg-oci-');
    const inspect = JSON.parse(
      execFileSync('skopeo', ['inspect', `oci-archive:${ociTar}:${VERSION}`], { encoding: 'utf8' }),
    );
    t.equal(inspect.Architecture, 'amd64');
    t.equal(inspect.Labels['org.opencontainers.image.version'], VERSION);
    execFileSync('skopeo', [
      'copy',
      '-q',
      `oci-archive:${ociTar}:${VERSION}`,
      `oci:${join(dir, 'layout')}:${VERSION}`,
    ]);
    execFileSync(
      'umoci',
      ['unpack', '--rootless', '--image', `${join(dir, 'layout')}:${VERSION}`, join(dir, 'bundle')],
      { stdio: 'ignore' },
    );
    const rootfs = join(dir, 'bundle', 'rootfs');
    const inChroot = (args: string[], timeoutMs?: number) =>
      sh(
        'chroot',
        [rootfs, ...args],
        { PATH: '/usr/local/bin:/usr/local/sbin:/usr/bin:/bin:/usr/sbin:/sbin' },
        timeoutMs,
      );
    t.not(
      (await inChroot(['/bin/sh', '-c', 'command -v node'])).code,
      0,
      "no node in the image's PATH",
    );
    t.notOk(existsSync(join(rootfs, 'usr/bin/node')), 'no host node in the rootfs');
    const v = await inChroot(['/usr/local/bin/bundle-agent', '--version']);
    t.equal(v.stdout.trim(), VERSION, `bundle-agent --version under chroot (${v.stderr})`);

    // A full load under chroot: the node root lives inside the rootfs, containerd (outside) uses
    // its socket and certs.d there; /proc and /dev are mounted as a container runtime would.
    for (const m of ['proc', 'dev']) {
      if (m === 'proc') execFileSync('mount', ['-t', 'proc', 'proc', join(rootfs, 'proc')]);
      else execFileSync('mount', ['--rbind', '/dev', join(rootfs, 'dev')]);
      t.teardown(() => {
        try {
          execFileSync('umount', ['-l', join(rootfs, m)]);
        } catch {
          /* gone */
        }
      });
    }
    const root = join(rootfs, 'node');
    const keys = await keygen(dir);
    await nodeRoot(
      root,
      keys.pub,
      'runtime: containerd\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\n',
    );
    // nodeRoot wrote `root: <host path>`: inside the chroot the node root is /node.
    execFileSync('sed', [
      '-i',
      `s|^root: .*|root: /node|`,
      join(root, 'etc/bundle-agent/config.yaml'),
    ]);
    const ctd = await startContainerd(30_000, {
      certsDir: join(root, 'etc/containerd/certs.d'),
      socket: join(root, 'run/containerd/containerd.sock'),
    });
    t.teardown(() => ctd.stop());
    await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(root, 'update.bundle'),
    });
    const r = await inChroot([
      '/usr/local/bin/bundle-agent',
      'load',
      '/node/update.bundle',
      '--config',
      '/node/etc/bundle-agent/config.yaml',
    ]);
    t.equal(r.code, 0, `load under chroot exits 0 (${r.stderr.slice(-800)})`);
    const cri = new CriImageClient(ctd.socket);
    t.teardown(() => cri.close());
    const listed = await cri.listImages();
    for (const img of images)
      t.ok(
        listed.some((i) => i.repoTags.includes(img.name)),
        `containerd has ${img.name}`,
      );
    t.same(await readdir(join(root, 'etc/containerd/certs.d')), [], 'mirrors removed');
    await rm(join(root, 'update.bundle'));
  },
);

t.test(
  'arm64: AArch64 binaries that run under qemu-aarch64, with the arm64 image as their sysroot',
  async (t) => {
    const dir = await tmpdir(t, 'ob-pkg-arm64-');
    const machine = (f: string) =>
      /Machine:\s+(.*)/.exec(execFileSync('readelf', ['-h', f], { encoding: 'utf8' }))?.[1]?.trim();

    // The image: skopeo picks arm64 out of the index; umoci unpacks the archive's VERSION-arm64.
    const inspect = JSON.parse(
      execFileSync(
        'skopeo',
        ['inspect', '--override-arch', 'arm64', `oci-archive:${ociTar}:${VERSION}`],
        { encoding: 'utf8' },
      ),
    );
    t.equal(inspect.Architecture, 'arm64', 'skopeo --override-arch arm64 selects the arm64 image');
    const layout = join(dir, 'layout');
    await mkdir(layout);
    execFileSync('tar', ['-xf', ociTar, '-C', layout]);
    execFileSync(
      'umoci',
      ['unpack', '--rootless', '--image', `${layout}:${VERSION}-arm64`, join(dir, 'bundle')],
      { stdio: 'ignore' },
    );
    const rootfs = join(dir, 'bundle', 'rootfs');
    t.equal(machine(join(rootfs, 'bin/dash')), 'AArch64', "the image's base is arm64 (dash)");
    t.equal(
      machine(join(rootfs, 'usr/local/lib/bundle-agent/node')),
      'AArch64',
      "the image's node is arm64",
    );
    t.ok(
      existsSync(join(rootfs, 'usr/local/share/man/man8/bundle-agent.8')),
      'the image carries bundle-agent(8)',
    );

    // The tarballs: node and the zstd addon are AArch64 ELF; the launcher is the tested amd64 one.
    const prefix = join(dir, 'prefix');
    await mkdir(prefix);
    for (const tgz of [agentArmTgz, builderArmTgz])
      execFileSync('tar', ['-xzf', tgz, '-C', prefix, '--strip-components=1']);
    for (const name of ['bundle-agent', 'bundle']) {
      t.equal(machine(join(prefix, 'lib', name, 'node')), 'AArch64', `${name}: node is AArch64`);
      t.equal(
        machine(join(prefix, 'lib', name, 'node_modules/zstd-napi/binding.node')),
        'AArch64',
        `${name}: zstd addon is AArch64`,
      );
      t.equal(
        await readFile(join(prefix, 'bin', name), 'utf8'),
        execFileSync(
          'tar',
          [
            '-xzOf',
            name === 'bundle' ? builderTgz : agentTgz,
            `${name}-${VERSION}-linux-amd64/bin/${name}`,
          ],
          { encoding: 'utf8' },
        ),
        `${name}: the launcher is the amd64 one (run above)`,
      );
    }
    t.equal(machine(join(prefix, 'lib/bundle/node_modules/zstd-napi/binding.node')), 'AArch64');

    // What the launcher execs, run by qemu (without binfmt_misc an arm64 exec from the launcher's
    // shell would fail), with no host node on PATH and the image's libc, libstdc++ as sysroot.
    const qemu = ['/usr/bin/qemu-aarch64', '/usr/bin/qemu-aarch64-static'].find((q) =>
      existsSync(q),
    );
    t.ok(qemu, 'qemu-aarch64 is installed (qemu-user, from scripts/setup.sh)');
    if (!qemu) return;
    const PATH = await pathWithoutNode(dir);
    const arm = (name: string, args: string[]) =>
      sh(
        qemu,
        [
          '-L',
          rootfs,
          join(prefix, 'lib', name, 'node'),
          join(prefix, 'lib', name, 'app/cli.mjs'),
          ...args,
        ],
        { PATH },
        300_000,
      );
    const av = await arm('bundle-agent', ['--version']);
    t.equal(av.stdout.trim(), VERSION, `arm64 bundle-agent --version (${av.stderr.slice(-400)})`);
    const bv = await arm('bundle', ['--version']);
    t.equal(bv.stdout.trim(), VERSION, `arm64 bundle --version (${bv.stderr.slice(-400)})`);
    // verify reads the whole archive through zstd: the cross-built addon at work
    const keys = await keygen(dir);
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      arch: 'arm64',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'arm.bundle'),
    });
    const v = await arm('bundle', ['verify', file, '--key', keys.pub, '--quiet']);
    t.equal(v.code, 0, `arm64 bundle verify exits 0 (${v.stderr.slice(-400)})`);
    t.match(v.stdout, /^valid: /, 'and says valid');
    const other = await keygen(dir, 'other');
    const bad = await arm('bundle', ['verify', file, '--key', other.pub, '--quiet']);
    t.equal(bad.code, 1, `and fails (1) with another key (${bad.stderr.trim()})`);
  },
);
