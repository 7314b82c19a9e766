// A stock containerd (1.x, as Debian ships it) has its CRI registry config_path empty, so the
// hosts.toml files the agent writes are never read and every pull goes to the real registry.
// With a real containerd: the load is refused before a byte leaves the bundle file, in one line
// naming config_path and the fix; with install.sh --configure-containerd's drop-in applied (the
// real script, against a temp root) the same check passes.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { createServer, type Socket } from 'node:net';
import { copyFile, cp, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerdTarget, createLogger, loadConfig } from '@offline-bundle/agent';
import {
  CriImageClient,
  configPathReads,
  criStatusInfo,
  registryConfigPath,
} from '@offline-bundle/runtime';
import { tmpdir } from '../helpers/tmp.mjs';
import { startContainerd } from '../runtime/lib.js';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';

const REPO = new URL('../../', import.meta.url).pathname;
const CERTS = 'etc/containerd/certs.d';

/** A node root whose containerd (real, on a socket under the root) was started with `configPath` as its CRI registry config_path. */
async function node(
  t: any,
  prefix: string,
  ctdOpts: { configPath?: string; beforeStart?: (config: string) => Promise<void> },
  root?: string,
) {
  const dir = await tmpdir(t, prefix);
  root ??= join(dir, 'node');
  const ctd = await startContainerd(30_000, {
    certsDir: join(root, CERTS),
    socket: join(root, 'run/containerd/containerd.sock'),
    ...ctdOpts,
  });
  t.teardown(() => ctd.stop());
  return { dir, root, ctd };
}

t.test('config_path as a list, and a root the runtime does not see', async (t) => {
  t.ok(configPathReads('/etc/containerd/certs.d', '/etc/containerd/certs.d'), 'the same dir');
  t.ok(
    configPathReads('/etc/docker/certs.d:/etc/containerd/certs.d/', '/etc/containerd/certs.d'),
    'one entry of a list',
  );
  t.notOk(configPathReads('', '/etc/containerd/certs.d'), 'empty: containerd reads no hosts.toml');
  t.notOk(configPathReads('/etc/containerd/certs', '/etc/containerd/certs.d'), 'another dir');
  t.ok(
    configPathReads('/etc/containerd/certs.d', '/host/etc/containerd/certs.d', '/host'),
    'a DaemonSet: containerd names the path without /host',
  );
  t.notOk(
    configPathReads('/etc/containerd/certs.d', '/host/etc/containerd/certs.d'),
    'without that root, /host/etc is not /etc',
  );
  t.ok(
    configPathReads(
      '/srv/rootfs/node/etc/containerd/certs.d',
      '/node/etc/containerd/certs.d',
      '/node',
    ),
    'the agent in a chroot (root /node): containerd names the same dir from outside',
  );
  t.notOk(
    configPathReads(
      '/srv/rootfs/xnode/etc/containerd/certs.d',
      '/node/etc/containerd/certs.d',
      '/node',
    ),
    'only at a path component',
  );
  t.notOk(
    configPathReads('/var/lib/rancher/k3s/agent/etc/containerd/certs.d', '/etc/containerd/certs.d'),
    "k3s's own certs.d is not the agent's /etc one",
  );
  t.equal(
    registryConfigPath({ config: JSON.stringify({ registry: { configPath: '' } }) }),
    '',
    'empty is a value',
  );
  t.equal(
    registryConfigPath({ config: JSON.stringify({ containerd: {} }) }),
    undefined,
    'no registry in the answer: unknown',
  );
  t.equal(registryConfigPath({ config: 'not json' }), undefined, 'unreadable: unknown');
});

t.test(
  'stock containerd (config_path ""): the load is refused before anything is staged, in one line naming the setting and the fix',
  async (t) => {
    const n = await node(t, 'ob-ctd-stock-', { configPath: '' });
    const info = await criStatusInfo(n.ctd.socket);
    t.equal(registryConfigPath(info), '', 'containerd itself reports config_path ""');
    const keys = await keygen(n.dir);
    const config = await nodeRoot(
      n.root,
      keys.pub,
      'runtime: containerd\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\n',
    );
    const file = await makeBundle(n.dir, {
      key: keys.key,
      version: '1.1.0',
      images: [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } }],
      upgradeFrom: ['1.0.0'],
      out: join(n.dir, 'update.bundle'),
    });

    const r = await run(AGENT, ['load', file, '--config', config]);
    t.not(r.code, 0, 'the load fails');
    const certsDir = join(n.root, CERTS);
    // as containerd names it: without the agent's root (here a temp dir, on a DaemonSet /host)
    t.match(
      r.stderr,
      'bundle-agent: RuntimeIgnoresMirror: containerd ignores /etc/containerd/certs.d: its CRI registry config_path is ""',
      'names the directory and the setting',
    );
    t.match(r.stderr, 'install.sh --runtime containerd --configure-containerd', 'names the fix');
    t.match(
      r.stderr,
      '[plugins."io.containerd.grpc.v1.cri".registry] config_path',
      'and the setting to add by hand',
    );
    const status = JSON.parse(
      await readFile(join(n.root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.equal(status.phase, 'Failed');
    const failed = status.conditions.find((c: { type: string }) => c.type === 'Failed');
    t.equal(failed?.reason, 'RuntimeIgnoresMirror', 'the Failed condition carries the reason');
    t.notMatch(failed?.message ?? '', /\n/, 'one line');
    t.match(
      status.message,
      /^Failed: The container runtime of this node is not set up to load updates/,
      'the technician reads a plain sentence',
    );
    t.notOk(
      status.conditions.some(
        (c: { type: string }) => c.type === 'Staged' || c.type === 'SpaceAvailable',
      ),
      'no staging step began',
    );
    t.same(
      await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []),
      [],
      'nothing staged, no .partial',
    );
    t.same(await readdir(certsDir), [], 'no hosts.toml written');
    const cri = new CriImageClient(n.ctd.socket);
    t.teardown(() => cri.close());
    t.same(await cri.listImages(), [], 'containerd got no image');
  },
);

/** The parts of an unpacked agent tarball install.sh reads (the real script and unit files; the program is a stub). */
async function fakeTarball(dir: string): Promise<string> {
  const pkg = join(dir, 'pkg');
  const share = join(pkg, 'share/bundle-agent');
  for (const d of ['bin', 'lib/bundle-agent', 'share/doc/bundle-agent', 'share/man/man8'])
    await mkdir(join(pkg, d), { recursive: true });
  await cp(join(REPO, 'systemd'), share, { recursive: true });
  await copyFile(join(REPO, 'scripts/install.sh'), join(pkg, 'install.sh'));
  await writeFile(join(pkg, 'bin/bundle-agent'), '#!/bin/sh\necho 0.0.0-test\n', { mode: 0o755 });
  await writeFile(join(pkg, 'share/man/man8/bundle-agent.8'), '');
  return pkg;
}

t.test(
  'install.sh --configure-containerd: the drop-in makes the same check pass, and --unconfigure-containerd takes it out',
  async (t) => {
    const dir = await tmpdir(t, 'ob-ctd-install-');
    const root = join(dir, 'node');
    const pkg = await fakeTarball(dir);
    const main = join(root, 'etc/containerd/config.toml');
    const install = (...args: string[]) =>
      execFileSync(
        'sh',
        [join(pkg, 'install.sh'), '--root', root, '--runtime', 'containerd', ...args],
        { encoding: 'utf8', env: { ...process.env, PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
      );
    let stock = '';
    const n = await node(
      t,
      'ob-ctd-installed-',
      {
        configPath: '',
        // the private containerd's config, config_path "" as shipped, is the site's config.toml: install.sh edits it, containerd starts with the result
        beforeStart: async (config) => {
          stock = await readFile(config, 'utf8');
          await mkdir(join(root, 'etc/containerd'), { recursive: true });
          await writeFile(main, stock);
          const out = install('--configure-containerd');
          t.match(
            out,
            /config_path includes \/etc\/containerd\/certs\.d .*checked with containerd config dump/,
            'install.sh checked the merged config',
          );
          // the imports line names /etc/containerd/conf.d as on a node; here it is under the temp root
          await writeFile(
            config,
            (await readFile(main, 'utf8')).replace(
              '"/etc/containerd/conf.d/*.toml"',
              JSON.stringify(join(root, 'etc/containerd/conf.d/*.toml')),
            ),
          );
        },
      },
      root,
    );
    t.match(
      await readFile(main, 'utf8'),
      /^imports = \["\/etc\/containerd\/conf\.d\/\*\.toml"\]/,
      'config.toml gained one imports line',
    );
    t.match(
      await readFile(join(root, 'etc/containerd/conf.d/offline-bundle.toml'), 'utf8'),
      /config_path = "\/etc\/containerd\/certs\.d"/,
      'the drop-in sets config_path',
    );
    t.equal(
      registryConfigPath(await criStatusInfo(n.ctd.socket)),
      '/etc/containerd/certs.d',
      'containerd runs with it',
    );

    const keys = await keygen(n.dir);
    const config = await loadConfig(
      await nodeRoot(root, keys.pub, 'runtime: containerd\nversion:\n  current: "1.0.0"\n'),
    );
    const target = new ContainerdTarget(config);
    t.teardown(() => target.close());
    await t.resolves(
      target.checkConfig(),
      'the check passes: containerd reads the certs.d the agent writes to',
    );

    install('--configure-containerd');
    t.match(
      await readFile(main, 'utf8'),
      /^imports = \[[^\n]*\n(?!imports)/,
      'run again: still one imports line',
    );
    install('--unconfigure-containerd');
    t.equal(await readFile(main, 'utf8'), stock, 'undone: config.toml as it was');
    t.same(
      await readdir(join(root, 'etc/containerd/conf.d')).catch(() => []),
      [],
      'and the drop-in gone',
    );
  },
);

t.test(
  'a socket that never answers: the check gives up after 5 s with a warning, and does not refuse',
  async (t) => {
    const dir = await tmpdir(t, 'ob-ctd-silent-');
    const root = join(dir, 'node');
    await mkdir(join(root, 'run/containerd'), { recursive: true });
    const held: Socket[] = [];
    const silent = createServer((s) => {
      held.push(s);
    });
    await new Promise<void>((resolve) =>
      silent.listen(join(root, 'run/containerd/containerd.sock'), resolve),
    );
    t.teardown(() => {
      for (const s of held) s.destroy();
      silent.close();
    });
    const config = await loadConfig(
      await nodeRoot(
        root,
        undefined,
        'runtime: containerd\ntrust:\n  digest: sha256:' + '0'.repeat(64) + '\n',
      ),
    );
    const warnings: string[] = [];
    const log: ReturnType<typeof createLogger> = {
      info: () => undefined,
      warn: (_e, msg) => {
        warnings.push(msg);
      },
      error: () => undefined,
    };
    const target = new ContainerdTarget(config, log);
    t.teardown(() => target.close());
    const started = Date.now();
    await t.resolves(target.checkConfig(), 'not refused: the pulls will tell');
    const took = Date.now() - started;
    t.ok(took >= 4_500 && took < 8_000, `gave up after the 5 s deadline (${took} ms)`);
    t.match(
      warnings.join('\n'),
      /cannot ask containerd for its CRI configuration .*not checked/,
      'and says the check was not made',
    );
  },
);
