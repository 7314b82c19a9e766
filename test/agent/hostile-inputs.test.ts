// Faults and hostile inputs around the bundle rather than in it: files that are not files,
// files others could change, a reader that goes away, a target no directory can be made in,
// a bundle deleted while it is read.
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { chmod, mkdir, readFile, readdir, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import {
  addForgotten,
  createLogger,
  parseConfig,
  readBundleRecords,
  readForgotten,
  readReleases,
  recordRelease,
  runLoad,
  type RuntimeTarget,
} from '@offline-bundle/agent';
import { generateKeyPair } from '@offline-bundle/format';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { makeBundle } from '../format/craft.js';
import { AGENT, BUNDLE, nodeRoot, run } from './fixtures.js';

const lastJson = (out: string) => JSON.parse(out.trim().split('\n').pop()!);

async function node(t: Parameters<Parameters<typeof t.test>[1]>[0]) {
  const b = await makeBundle(t);
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  const root = join(b.dir, 'node');
  const config = await nodeRoot(
    root,
    pub,
    'runtime: crio\nversion:\n  current: "1.2.2"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ["true"]\n',
  );
  await chmod(b.dir, 0o755);
  return {
    ...b,
    pub,
    root,
    config,
    key: join(root, 'etc/bundle-agent/keys/factory.pub'),
    privatePem: b.key.privatePem,
  };
}

t.test('the agent refuses a config or a trusted key that others could change', async (t) => {
  const n = await node(t);
  const ok = await run(AGENT, ['status', '--config', n.config]);
  t.ok(
    ok.code !== 1 && ok.stderr === '',
    'mode 0644: accepted (the status itself: not running, exit 3)',
  );
  for (const [what, file] of [
    ['config', n.config],
    ['key', n.key],
  ] as const) {
    for (const mode of [0o666, 0o664]) {
      await chmod(file, mode);
      const r = await run(AGENT, ['load', n.path, '--config', n.config, '--json']);
      t.equal(r.code, 1, `${what} mode ${mode.toString(8)}: refused`);
      t.equal(lastJson(r.stdout).error.reason, 'InvalidConfig', 'as InvalidConfig');
      t.ok(r.stderr.includes(`chmod go-w ${file}`), 'naming the file and the fix');
      await chmod(file, 0o644);
    }
    if (process.getuid?.() === 0) {
      execFileSync('chown', ['4321', file]);
      const r = await run(AGENT, ['load', n.path, '--config', n.config, '--json']);
      t.equal(
        lastJson(r.stdout).error.reason,
        'InvalidConfig',
        `${what} owned by another user: refused`,
      );
      t.ok(r.stderr.includes(`chown root ${file}`), 'naming the fix');
      execFileSync('chown', ['0', file]);
    }
  }
  t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
});

// issue #39: the signing key where its public half belongs was trusted ("valid … signed by
// factory.key") and could be spread to every node; now every command that reads trust keys says no
t.test(
  'a private key given as a trust key is refused by every command and by the agent config, naming the file',
  async (t) => {
    const n = await node(t);
    const priv = join(n.dir, 'factory.key');
    await writeFile(priv, n.privatePem, { mode: 0o600 });
    const line = `${priv} is a private key: give its public half (${join(n.dir, 'factory.pub')}, made by "bundle keygen" beside it, or "openssl pkey -in ${priv} -pubout`;
    const commands: [string, string, string[]][] = [
      ['bundle verify', BUNDLE, ['verify', n.path, '--key', priv]],
      ['bundle extract', BUNDLE, ['extract', n.path, join(n.dir, 'out'), '--key', priv]],
      [
        'bundle cluster approve',
        BUNDLE,
        ['cluster', 'approve', n.path, '--key', priv, '--kubeconfig', join(n.dir, 'none')],
      ],
      [
        'bundle cluster prepare',
        BUNDLE,
        [
          'cluster',
          'prepare',
          n.path,
          '--key',
          priv,
          '--kubeconfig',
          join(n.dir, 'none'),
          '--dry-run',
        ],
      ],
      ['bundle-agent serve', AGENT, ['serve', n.path, '--key', priv]],
    ];
    for (const [what, bin, args] of commands) {
      const r = await run(bin, args, process.env, 20_000);
      t.equal(r.code, 1, `${what}: refused`);
      t.equal(r.stdout, '', `${what}: nothing served or said valid`);
      t.ok(
        r.stderr.startsWith(
          `${bin === BUNDLE ? 'bundle' : 'bundle-agent'}: ${bin === BUNDLE ? 'KEY_ERROR' : 'InvalidConfig'}: ${line}`,
        ),
        `${what}: one line naming the file and the fix: ${r.stderr}`,
      );
      t.equal(r.stderr.trimEnd().split('\n').length, 1, `${what}: one line`);
    }
    const json = await run(BUNDLE, ['verify', n.path, '--key', priv, '--json']);
    t.equal(lastJson(json.stdout).error.code, 'KEY_ERROR', '--json: KEY_ERROR');
    const sealed = join(n.dir, 'sealed.key');
    await writeFile(sealed, generateKeyPair('ecdsa-p256', 'secret').privatePem, { mode: 0o600 });
    const enc = await run(
      BUNDLE,
      ['verify', n.path, '--key', sealed],
      { ...process.env, BUNDLE_KEY_PASSPHRASE: 'secret' },
      20_000,
    );
    t.equal(enc.code, 1, 'an encrypted private key: refused, even with its passphrase at hand');
    t.match(
      enc.stderr,
      `${sealed} is an encrypted private key: give its public half`,
      'said to be one',
    );

    // the agent's trust.keys naming the private key (0600, as a careful admin would keep it)
    const nodeKey = join(n.root, 'etc/bundle-agent/keys/factory.key');
    await writeFile(nodeKey, n.privatePem, { mode: 0o600 });
    await writeFile(
      n.config,
      (await readFile(n.config, 'utf8')).replace('keys/factory.pub', 'keys/factory.key'),
    );
    const load = await run(AGENT, ['load', n.path, '--config', n.config, '--json']);
    t.equal(load.code, 1, 'bundle-agent load: refused');
    t.equal(lastJson(load.stdout).error.reason, 'InvalidConfig', 'as InvalidConfig');
    t.ok(
      load.stderr.includes(`${nodeKey} is a private key: give its public half`),
      `naming the file: ${load.stderr}`,
    );
    const status = JSON.parse(
      await readFile(join(n.root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    const failed = status.conditions.find((c: { type: string }) => c.type === 'Failed');
    t.equal(failed?.reason, 'InvalidConfig', 'the status: Failed, InvalidConfig');
    t.ok(failed?.message.includes(`${nodeKey} is a private key`), 'its message names the file');
    const serve = await run(AGENT, ['serve', n.path, '--config', n.config], process.env, 20_000);
    t.ok(
      serve.stderr.startsWith(`bundle-agent: InvalidConfig: ${nodeKey} is a private key`),
      `bundle-agent serve with the config's trust: refused (${serve.stderr})`,
    );
    t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
  },
);

t.test('bundle verify only warns about a key others could change', async (t) => {
  const n = await node(t);
  await chmod(n.pub, 0o666);
  // --quiet: no progress lines, so the warning is all stderr holds
  const r = await run(BUNDLE, ['verify', n.path, '--key', n.pub, '--quiet']);
  t.equal(r.code, 0, 'verified');
  t.match(
    r.stderr,
    new RegExp(`^bundle: warning: .*chmod go-w ${n.pub}\\n$`),
    'one warning line with the fix',
  );
});

t.test('key and config files are bounded and must be regular files', async (t) => {
  const n = await node(t);
  // /dev/urandom never ends: an answer at all (within run's 20 s deadline, else no JSON) is the bound
  const key = await run(
    BUNDLE,
    ['verify', n.path, '--key', '/dev/urandom', '--json'],
    process.env,
    20_000,
  );
  t.equal(key.code, 1);
  t.equal(lastJson(key.stdout).error.code, 'KEY_ERROR', '--key /dev/urandom: KEY_ERROR');
  const cfg = await run(
    AGENT,
    ['status', '--config', '/dev/urandom', '--json'],
    process.env,
    20_000,
  );
  t.equal(
    lastJson(cfg.stdout).error.reason,
    'InvalidConfig',
    '--config /dev/urandom: InvalidConfig',
  );
  await writeFile(n.config, `${await readFile(n.config, 'utf8')}# ${'x'.repeat(1024 * 1024)}\n`);
  const big = await run(AGENT, ['status', '--config', n.config, '--json']);
  t.equal(lastJson(big.stdout).error.reason, 'InvalidConfig', 'a config over 1 MiB: InvalidConfig');
});

t.test('a FIFO given as the bundle is refused at once', async (t) => {
  const n = await node(t);
  const fifo = join(n.dir, 'fifo.bundle');
  execFileSync('mkfifo', [fifo]);
  const v = await run(BUNDLE, ['verify', fifo, '--key', n.pub, '--json'], process.env, 20_000);
  t.equal(lastJson(v.stdout).error.code, 'NOT_A_REGULAR_FILE', 'bundle verify: NOT_A_REGULAR_FILE');
  const i = await run(BUNDLE, ['inspect', fifo], process.env, 20_000);
  t.match(i.stderr, /^bundle: NOT_A_REGULAR_FILE: .*FIFO.*\n$/, 'bundle inspect: one line');
  const l = await run(AGENT, ['load', fifo, '--config', n.config, '--json'], process.env, 20_000);
  t.equal(
    l.code,
    2,
    'bundle-agent load exits (it used to hang, deaf to SIGTERM): a usage error, as for any path that is not a bundle',
  );
  t.match(l.stderr, /fifo\.bundle is a FIFO.*, not a regular file/, 'naming what it is');
});

t.test('a reader that goes away: no EPIPE stack trace', async (t) => {
  for (const bin of [BUNDLE, AGENT]) {
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [bin, '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
      child.stdout.destroy(); // as `| head -1` does once it has its line
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      child.on('close', (code) => resolve({ code, stderr }));
    });
    t.equal(r.code, 0, `${bin.split('/').pop()} --help with its reader gone: exit 0`);
    t.equal(r.stderr, '', 'and nothing on stderr');
  }
});

t.test('bundle extract into /proc fails at once (it used to spin at full CPU)', async (t) => {
  const n = await node(t);
  const started = Date.now();
  const r = await run(
    BUNDLE,
    ['extract', n.path, '/proc/ob-test-x', '--key', n.pub, '--json'],
    process.env,
    20_000,
  );
  t.equal(r.code, 1);
  t.equal(lastJson(r.stdout).error.code, 'CANNOT_CREATE_DIR');
  t.ok(Date.now() - started < 15_000, `within seconds (${Date.now() - started} ms)`);
});

t.test('a bundle deleted while it is staged: MediaRemoved', async (t) => {
  const n = await node(t);
  const config = parseConfig(await readFile(n.config, 'utf8'), n.config);
  const tracker = new StatusTracker(emptyStatus('node-a'));
  let deleted = false;
  tracker.onChange((s) => {
    // once the pass has read its first bytes: the file goes, its open descriptor stays
    if (!deleted && s.phase === 'Staging' && s.progress.bytesDone > 0) {
      deleted = true;
      void unlink(n.path);
    }
  });
  const never = async () => {
    throw new Error('not reached');
  };
  const runtime: RuntimeTarget = {
    mirror: never,
    preload: never,
    pin: never,
    cleanup: never,
    close: async () => undefined,
  };
  const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
  const err = await runLoad(n.path, { config, log, tracker, runtime }).then(
    () => undefined,
    (e: unknown) => e as { reason?: string; message: string },
  );
  t.ok(deleted, 'the file was deleted mid-way');
  t.equal(err?.reason, 'MediaRemoved', `reason MediaRemoved (${err?.message})`);
  t.equal(
    tracker.current.conditions.find((c) => c.type === 'Failed')?.reason,
    'MediaRemoved',
    'and so says the status',
  );
});

t.test(
  'a damaged status file is one StatusDamaged line, never an internal error, a hang or its size in memory',
  async (t) => {
    const n = await node(t);
    const statusFile = join(n.root, 'var/lib/bundle-agent/status.json');
    await mkdir(dirname(statusFile), { recursive: true });
    const good = { ...emptyStatus('node-a'), message: 'Waiting for a USB stick.' };
    const cases: [string, string | Buffer][] = [
      ['empty', ''],
      ['not JSON', 'garbage'],
      ['{}', '{}'],
      ['[]', '[]'],
      ['a string', '"str"'],
      ['an unknown phase', JSON.stringify({ ...good, phase: 'Bogus' })],
      [
        'Staging without progress',
        JSON.stringify({ ...good, phase: 'Staging', progress: undefined }),
      ],
      [
        'a writer with a heartbeat that is not a time',
        JSON.stringify({
          ...good,
          writer: { pid: process.pid, heartbeatAt: 'garbage', heartbeatSeconds: 30 },
        }),
      ],
      ['2 MB', Buffer.alloc(2_000_000, 0x20)],
    ];
    for (const [what, content] of cases) {
      await writeFile(statusFile, content);
      const r = await run(AGENT, ['status', '--config', n.config]);
      t.equal(r.code, 1, `${what}: an error`);
      t.match(
        r.stderr,
        /^bundle-agent: StatusDamaged: status file .*status\.json is damaged \(.*\): the agent writes it anew when it starts/,
        `${what}: names the file and the fix`,
      );
      t.equal(r.stderr.trim().split('\n').length, 1, `${what}: one line`);
    }
    await unlink(statusFile);
    execFileSync('mkfifo', [statusFile]);
    const fifo = await run(AGENT, ['status', '--config', n.config], process.env, 20_000);
    t.match(fifo.stderr, /StatusDamaged: .*FIFO/, 'a FIFO: refused at once, not read');
    await unlink(statusFile);
    await writeFile(statusFile, JSON.stringify(good));
    const ok = await run(AGENT, ['status', '--config', n.config]);
    t.equal(
      ok.code,
      0,
      'a well-formed file from an agent too old to name its writer: read as before',
    );
    t.equal(ok.stderr, '', 'no error');
  },
);

t.test('damaged release and bundle records are skipped, the good ones kept', async (t) => {
  const n = await node(t);
  const state = join(n.root, 'var/lib/bundle-agent');
  await recordRelease(state, {
    version: '1.2.3',
    arch: 'amd64',
    refs: ['quay.io/a/b:1'],
    loadedAt: new Date().toISOString(),
  });
  const dir = join(state, 'releases');
  await writeFile(join(dir, 'empty-object.json'), '{}');
  await writeFile(join(dir, 'null.json'), 'null');
  await writeFile(
    join(dir, 'number-version.json'),
    '{"version":5,"arch":"amd64","refs":[],"loadedAt":"x"}',
  );
  await writeFile(
    join(dir, 'refs-not-strings.json'),
    '{"version":"1.0.0","arch":"amd64","refs":[1],"loadedAt":"x"}',
  );
  execFileSync('mkfifo', [join(dir, 'fifo.json')]);
  t.same(
    (await readReleases(state)).map((r) => r.version),
    ['1.2.3'],
    'only the well-formed record',
  );
  await writeFile(join(state, 'bundles.json'), '{"bundles":[null,5,{"key":"k"}]}');
  t.same(
    (await readBundleRecords(state)).map((b) => b.key),
    ['k'],
    'bundle records: only entries with a key',
  );
  await addForgotten(state, '1.0.0', 'amd64');
  const doc = JSON.parse(await readFile(join(state, 'forgotten-releases.json'), 'utf8'));
  doc.releases.push(
    null,
    { version: '../../etc/x', arch: 'amd64', at: 'x' },
    { version: '1.1.0\n[Service]', arch: 'amd64', at: 'x' },
    { version: '1.2.0', arch: 7, at: 'x' },
  );
  await writeFile(join(state, 'forgotten-releases.json'), JSON.stringify(doc));
  t.same(
    (await readForgotten(state)).map((r) => r.version),
    ['1.0.0'],
    'forgotten releases: only well-formed versions and arches',
  );
});
