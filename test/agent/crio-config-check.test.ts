// Issue #39: before copying, the agent asks CRI-O (GET /config on its socket, what `crio status
// config` prints) whether it applies the crio.conf.d the agent writes to: a probe entry in our
// pins drop-in, a reload, and CRI-O's running pinned_images must show it. Against the CRI-O
// contract stand-in (test/helpers/crio-standin.mjs), which answers /config from CRI-O's stock
// defaults and, like CRI-O, re-reads only the --config-dir it was started with.
import t from 'tap';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { CrioTarget, createLogger, loadConfig } from '@offline-bundle/agent';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, crioFiles, crioNodeConfig, crioSighup, keygen, makeBundle, run } from './fixtures.js';
import { CRIO_CONFIG_MAX_BYTES, crioInfoGet, crioRunningConfig } from '../../agent/dist/runtime/crio-info-api.js';

const ORIGIN = 'origin.offline-bundle.invalid';
const images = [{ name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } }];

/**
 * A node root whose CRI-O is the stand-in, started with `elsewhere`'s crio.conf.d or
 * registries.conf.d (default: the ones the agent writes to).
 */
async function node(t: any, prefix: string, elsewhere: { crioDropInDir?: string; registriesDropInDir?: string } = {}) {
  const dir = await tmpdir(t, prefix);
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const files = await crioFiles(root);
  const moved: Record<string, string> = {};
  for (const [k, rel] of Object.entries(elsewhere)) {
    await mkdir(join(root, rel), { recursive: true });
    moved[k] = join(root, rel);
  }
  const crio = await startCrioStandin(t, { ...files, ...moved });
  await writeFile(join(root, 'run/crio/pid'), String(crio.pid));
  const config = await crioNodeConfig(root, keys.pub, { reload: crioSighup(join(root, 'run/crio/pid')), extra: 'preload:\n  method: cri\n  retries: 1\n' });
  const bundle = await makeBundle(dir, { key: keys.key, version: '1.1.0', images, upgradeFrom: ['1.0.0'], out: join(dir, 'update.bundle') });
  return {
    dir, root, crio, config, bundle,
    load: () => run(AGENT, ['load', bundle, '--config', config], process.env, 300_000),
    status: async () => JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8')),
    dropIns: async () => [
      ...(await readdir(join(root, 'etc/containers/registries.conf.d'))),
      ...(await readdir(join(root, 'etc/crio/crio.conf.d'))),
    ],
  };
}

t.test('contract (CRI-O stand-in): GET /config answers the running config from CRI-O\'s stock defaults, pinned_images only once a reload set it', async (t) => {
  const n = await node(t, 'ob-crio-cfg-contract-');
  const stock = await crioRunningConfig(n.crio.socket);
  t.match(stock, /^\[crio\.image\]$/m, 'TOML with CRI-O\'s tables');
  t.match(stock, /^pause_image = "registry\.k8s\.io\/pause:3\.10"$/m, 'the stock pause image');
  t.notMatch(stock, /pinned_images/, 'a nil pinned_images is left out, as BurntSushi/toml encodes it');
  t.notMatch(stock, /crio\.conf\.d|registries\.conf/, 'no key names the config dir or registries.conf(.d): CRI-O keeps them out of its TOML');
  t.same(Object.keys(JSON.parse(await crioInfoGet(n.crio.socket, '/info'))).sort(), ['cgroup_driver', 'default_id_mappings', 'storage_driver', 'storage_image', 'storage_root'], 'GET /info: crio status info');
  await t.rejects(crioInfoGet(n.crio.socket, '/nope'), /HTTP 404: 404 page not found/, 'an unknown path: chi\'s 404');
  t.equal((await n.crio.reload()).outcome, 'ok');
  t.match(await crioRunningConfig(n.crio.socket), /^pinned_images = \[\]$/m, 'after a reload: an empty list (ReloadPinnedImages)');
});

t.test('stock CRI-O (CRI-O stand-in, contract): the check passes, the load proceeds, no probe entry is left', async (t) => {
  const n = await node(t, 'ob-crio-cfg-stock-');
  const r = await n.load();
  t.equal(r.code, 0, `load exits 0 (stderr: ${r.stderr.slice(-600)})`);
  t.match(r.stderr, /CRI-O applies \S+crio\.conf\.d and reads \S+registries\.conf\.d \(after a reload its running config showed the probe pin, and a probe pull reached the probe mirror\)/, 'the journal says the check was made');
  t.equal((await n.status()).phase, 'Ready');
  const pins = await readFile(join(n.root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'), 'utf8');
  t.notMatch(pins, /offline-bundle-probe/, 'our pins drop-in holds no probe entry');
  t.notMatch(await crioRunningConfig(n.crio.socket), /offline-bundle-probe/, 'nor does CRI-O\'s running config');
  const ev = await n.crio.events();
  t.ok(ev.findIndex((e: any) => e.event === 'reload') < ev.findIndex((e: any) => e.event === 'pull'), 'the probe reload came before the first pull');
});

t.test('CRI-O started with --config-dir elsewhere (CRI-O stand-in, contract): refused before any copy, in one line, nothing written', async (t) => {
  const n = await node(t, 'ob-crio-cfg-elsewhere-', { crioDropInDir: 'etc/crio/other.conf.d' });
  const r = await n.load();
  t.not(r.code, 0, 'the load fails');
  const line = r.stderr.split('\n').find((l) => l.startsWith('bundle-agent: RuntimeIgnoresMirror:')) ?? '';
  t.match(line, /CRI-O does not apply \/etc\/crio\/crio\.conf\.d: /, 'names the directory, as CRI-O would see it');
  t.match(line, /has pinned_images = \[\], without offline-bundle-probe\.invalid\/config-check:[0-9a-f]{12} set by \/etc\/crio\/crio\.conf\.d\/offline-bundle-pins\.conf/, 'the value seen');
  t.match(line, /another --config-dir \(CONTAINER_CONFIG_DIR\)/, 'the setting');
  t.match(line, /start crio with --config-dir \/etc\/crio\/crio\.conf\.d .*set paths\.crioDropInDir/, 'the fix');
  const status = await n.status();
  t.equal(status.phase, 'Failed');
  const failed = status.conditions.find((c: any) => c.type === 'Failed');
  t.equal(failed?.reason, 'RuntimeIgnoresMirror', 'the Failed condition carries the reason');
  t.notMatch(failed?.message ?? '', /\n/, 'one line');
  t.match(status.message, /^Failed: The container runtime of this node is not set up to load updates/, 'the technician reads a plain sentence');
  t.notOk(status.conditions.some((c: any) => c.type === 'Staged' || c.type === 'SpaceAvailable'), 'no staging step began');
  t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
  t.same(await n.dropIns(), [], 'no mirror or pins drop-in left');
  t.notOk((await n.crio.events()).some((e: any) => e.event === 'pull'), 'CRI-O was asked for no image');
});

t.test('CRI-O started with --registries-conf-dir elsewhere (CRI-O stand-in, contract): refused before any copy, in one line, nothing written', async (t) => {
  const n = await node(t, 'ob-crio-cfg-regdir-', { registriesDropInDir: 'etc/containers/other.d' });
  const r = await n.load();
  t.not(r.code, 0, 'the load fails');
  const line = r.stderr.split('\n').find((l) => l.startsWith('bundle-agent: RuntimeIgnoresMirror:')) ?? '';
  t.match(line, /CRI-O does not read \/etc\/containers\/registries\.conf\.d: after a reload that reached it, a pull of offline-bundle-probe\.invalid\/config-check:[0-9a-f]{12} never reached the mirror 127\.0\.0\.1:\d+ that \/etc\/containers\/registries\.conf\.d\/offline-bundle-probe\.conf names/, 'names the directory and what was seen');
  t.match(line, /another --registries-conf-dir \(CONTAINER_REGISTRIES_CONF_DIR\)/, 'the setting');
  t.match(line, /set paths\.registriesDropInDir to the directory it reads/, 'the fix');
  const status = await n.status();
  t.equal(status.conditions.find((c: any) => c.type === 'Failed')?.reason, 'RuntimeIgnoresMirror');
  t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
  t.same(await n.dropIns(), [], 'no mirror, probe or pins drop-in left');
  const pulls = (await n.crio.events()).filter((e: any) => e.event === 'pull');
  t.same(pulls.map((e: any) => e.ref.split(':')[0]), ['offline-bundle-probe.invalid/config-check'], 'the probe was the only pull');
});

t.test('not checked, in one log line: a CRI-O before 1.28 (no pinned_images in its running config; CRI-O stand-in)', async (t) => {
  const dir = await tmpdir(t, 'ob-crio-cfg-old-');
  const root = join(dir, 'node');
  const files = await crioFiles(root);
  const crio = await startCrioStandin(t, { ...files, noPinSupport: true });
  const keys = await keygen(dir);
  const config = await loadConfig(await crioNodeConfig(root, keys.pub, { reload: crio.reloadCommand }));
  const lines: string[] = [];
  const target = new CrioTarget(config, createLogger({ write: (l: string) => lines.push(l) } as any));
  t.teardown(() => target.close());
  await t.resolves(target.checkConfig(), 'not refused');
  t.match(lines.join('\n'), /no pinned_images after the reload \(a CRI-O before 1\.28, or reload\.command did not reach it\): whether it applies \S+ is not checked/);
  t.same(await readdir(join(root, 'etc/crio/crio.conf.d')), [], 'the probe drop-in is gone');
});

t.test('GET /config is bounded (a socket that is not CRI-O: too large an answer, no answer)', async (t) => {
  const dir = await tmpdir(t, 'ob-crio-cfg-bounds-');
  const socket = join(dir, 'crio.sock');
  const server = createServer((req, res) => {
    if (req.url === '/config') res.end('x'.repeat(CRIO_CONFIG_MAX_BYTES + 1));
    // /info: never answers
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  t.teardown(() => { server.closeAllConnections(); server.close(); });
  await t.rejects(crioRunningConfig(socket), new RegExp(`GET /config answered more than ${CRIO_CONFIG_MAX_BYTES} bytes`), `over ${CRIO_CONFIG_MAX_BYTES} bytes: refused`);
  await t.rejects(crioInfoGet(socket, '/info', 300), /GET \/info got no answer within 300 ms/, 'no answer: a timeout');
});
