// Issue #39: before copying, the agent asks CRI-O (GET /config on its socket, what `crio status
// config` prints) whether it applies the crio.conf.d the agent writes to: a probe entry in our
// pins drop-in, a reload, and CRI-O's running pinned_images must show it. Against the CRI-O
// contract stand-in (test/helpers/crio-standin.mjs), which answers /config from CRI-O's stock
// defaults and, like CRI-O, re-reads only the --config-dir it was started with.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { connect, createServer as createNetServer } from 'node:net';
import { watch } from 'node:fs';
import { join } from 'node:path';
import { CrioTarget, createLogger, loadConfig } from '@offline-bundle/agent';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  AGENT,
  crioFiles,
  crioNodeConfig,
  crioSighup,
  keygen,
  makeBundle,
  run,
} from './fixtures.js';
import {
  CRIO_CONFIG_MAX_BYTES,
  crioInfoGet,
  crioRunningConfig,
} from '../../agent/dist/runtime/crio-info-api.js';
import { ignoredCrioDirMessage } from '../../agent/dist/runtime/crio-config-check.js';
import { startMirrorProbeListener } from '../../agent/dist/runtime/crio-mirror-probe.js';

const ORIGIN = 'origin.offline-bundle.invalid';
const PROBE = /offline-bundle-probe\.invalid\//;
const images = [{ name: `${ORIGIN}/acme/app:v1`, files: { 'app.txt': 'app v1' } }];

/**
 * A node root whose CRI-O is the stand-in, started with `elsewhere`'s crio.conf.d or
 * registries.conf.d (default: the ones the agent writes to).
 */
async function node(
  t: any,
  prefix: string,
  elsewhere: { crioDropInDir?: string; registriesDropInDir?: string } = {},
  o: { reloadDelayMs?: number; reloadThen?: string } = {},
) {
  const dir = await tmpdir(t, prefix);
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const files = await crioFiles(root);
  const moved: Record<string, string> = {};
  for (const [k, rel] of Object.entries(elsewhere)) {
    await mkdir(join(root, rel), { recursive: true });
    moved[k] = join(root, rel);
  }
  const crio = await startCrioStandin(t, {
    ...files,
    ...moved,
    ...(o.reloadDelayMs ? { reloadDelayMs: o.reloadDelayMs } : {}),
  });
  await writeFile(join(root, 'run/crio/pid'), String(crio.pid));
  const writeConfig = (then?: string) =>
    crioNodeConfig(root, keys.pub, {
      reload: crioSighup(join(root, 'run/crio/pid'), then),
      extra: 'preload:\n  method: cri\n  retries: 1\n',
    });
  const config = await writeConfig(o.reloadThen);
  const bundle = await makeBundle(dir, {
    key: keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(dir, 'update.bundle'),
  });
  const lines: string[] = [];
  /** A CrioTarget on this node's config as the agent builds it (the reload command as `writeConfig` last wrote it). */
  const target = async () => {
    const tg = new CrioTarget(
      await loadConfig(config),
      createLogger({ write: (l: string) => lines.push(l) } as any),
    );
    t.teardown(() => tg.close());
    return tg;
  };
  return {
    dir,
    root,
    crio,
    config,
    bundle,
    lines,
    target,
    writeConfig,
    pinsFile: join(root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'),
    load: () => run(AGENT, ['load', bundle, '--config', config], process.env, 300_000),
    status: async () =>
      JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8')),
    dropIns: async () => [
      ...(await readdir(join(root, 'etc/containers/registries.conf.d'))),
      ...(await readdir(join(root, 'etc/crio/crio.conf.d'))),
    ],
  };
}

t.test(
  "contract (CRI-O stand-in): GET /config answers the running config from CRI-O's stock defaults, pinned_images only once a reload set it",
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-contract-');
    const stock = await crioRunningConfig(n.crio.socket);
    t.match(stock, /^\[crio\.image\]$/m, "TOML with CRI-O's tables");
    t.match(stock, /^pause_image = "registry\.k8s\.io\/pause:3\.10"$/m, 'the stock pause image');
    t.notMatch(
      stock,
      /pinned_images/,
      'a nil pinned_images is left out, as BurntSushi/toml encodes it',
    );
    t.notMatch(
      stock,
      /crio\.conf\.d|registries\.conf/,
      'no key names the config dir or registries.conf(.d): CRI-O keeps them out of its TOML',
    );
    t.same(
      Object.keys(JSON.parse(await crioInfoGet(n.crio.socket, '/info'))).sort(),
      ['cgroup_driver', 'default_id_mappings', 'storage_driver', 'storage_image', 'storage_root'],
      'GET /info: crio status info',
    );
    await t.rejects(
      crioInfoGet(n.crio.socket, '/nope'),
      /HTTP 404: 404 page not found/,
      "an unknown path: chi's 404",
    );
    t.equal((await n.crio.reload()).outcome, 'ok');
    t.match(
      await crioRunningConfig(n.crio.socket),
      /^pinned_images = \[\]$/m,
      'after a reload: an empty list (ReloadPinnedImages)',
    );
  },
);

t.test(
  'stock CRI-O (CRI-O stand-in, contract): the check passes, the load proceeds, no probe entry is left',
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-stock-');
    const r = await n.load();
    t.equal(r.code, 0, `load exits 0 (stderr: ${r.stderr.slice(-600)})`);
    t.match(
      r.stderr,
      /CRI-O applies \S+crio\.conf\.d and reads \S+registries\.conf\.d \(after a reload its running config showed the probe pin, and a probe pull reached the probe mirror\)/,
      'the journal says the check was made',
    );
    t.equal((await n.status()).phase, 'Ready');
    const pins = await readFile(
      join(n.root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'),
      'utf8',
    );
    t.notMatch(pins, /offline-bundle-probe/, 'our pins drop-in holds no probe entry');
    t.notMatch(
      await crioRunningConfig(n.crio.socket),
      /offline-bundle-probe/,
      "nor does CRI-O's running config",
    );
    // the order CRI-O saw: the check's reload (with the probe pin), the reload after its files were
    // put back (without), the mirror's reload, then the bundle's pulls (a pull event is written
    // when its source's try ends, so the cancelled probe pull is not placed here)
    const ev = (await n.crio.events()).filter(
      (e: any) => e.event === 'reload' || (e.event === 'pull' && e.ref.startsWith(`${ORIGIN}/`)),
    );
    const reloads = ev.filter((e: any) => e.event === 'reload');
    t.ok(
      reloads[0]?.pinnedImages.some((p: string) => PROBE.test(p)),
      "the first reload is the check's: it took the probe pin",
    );
    t.notOk(
      reloads[1]?.pinnedImages.some((p: string) => PROBE.test(p)),
      'the next one, after its files were put back, dropped it',
    );
    const firstBundlePull = ev.findIndex((e: any) => e.event === 'pull');
    const mirrorReload = ev.findIndex(
      (e: any) => e.event === 'reload' && e.registries.includes(`${ORIGIN}/acme/app`),
    );
    t.ok(firstBundlePull > 0, 'the bundle was pulled');
    t.ok(
      mirrorReload >= 1 && mirrorReload < firstBundlePull,
      `the first pull of a bundle image came after the check's reloads and the mirror's (reload ${mirrorReload}, pull ${firstBundlePull})`,
    );
  },
);

t.test(
  'CRI-O started with --config-dir elsewhere (CRI-O stand-in, contract): refused before any copy, in one line, nothing written',
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-elsewhere-', { crioDropInDir: 'etc/crio/other.conf.d' });
    const r = await n.load();
    t.not(r.code, 0, 'the load fails');
    const line =
      r.stderr.split('\n').find((l) => l.startsWith('bundle-agent: RuntimeIgnoresMirror:')) ?? '';
    t.match(
      line,
      /CRI-O applying \/etc\/crio\/crio\.conf\.d was not confirmed within 30 s: /,
      'names the directory, as CRI-O would see it, and the wait',
    );
    t.match(
      line,
      /has pinned_images = \[\], without offline-bundle-probe\.invalid\/config-check:[0-9a-f]{12} set by \/etc\/crio\/crio\.conf\.d\/offline-bundle-pins\.conf/,
      'the value seen',
    );
    t.match(line, /another --config-dir \(CONTAINER_CONFIG_DIR\)/, 'the setting');
    t.match(
      line,
      /CRI-O's reload failed \(.*journalctl -u crio shows "Unable to reload configuration"/,
      'a failed reload named as a cause',
    );
    t.match(
      line,
      /start crio with --config-dir \/etc\/crio\/crio\.conf\.d .*set paths\.crioDropInDir/,
      'the fix',
    );
    const status = await n.status();
    t.equal(status.phase, 'Failed');
    const failed = status.conditions.find((c: any) => c.type === 'Failed');
    t.equal(failed?.reason, 'RuntimeIgnoresMirror', 'the Failed condition carries the reason');
    t.notMatch(failed?.message ?? '', /\n/, 'one line');
    t.match(
      status.message,
      /^Failed: The container runtime of this node is not set up to load updates/,
      'the technician reads a plain sentence',
    );
    t.notOk(
      status.conditions.some((c: any) => c.type === 'Staged' || c.type === 'SpaceAvailable'),
      'no staging step began',
    );
    t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
    t.same(await n.dropIns(), [], 'no mirror or pins drop-in left');
    t.notOk(
      (await n.crio.events()).some((e: any) => e.event === 'pull'),
      'CRI-O was asked for no image',
    );
  },
);

t.test(
  'CRI-O started with --registries-conf-dir elsewhere (CRI-O stand-in, contract): refused before any copy, in one line, nothing written',
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-regdir-', {
      registriesDropInDir: 'etc/containers/other.d',
    });
    const r = await n.load();
    t.not(r.code, 0, 'the load fails');
    const line =
      r.stderr.split('\n').find((l) => l.startsWith('bundle-agent: RuntimeIgnoresMirror:')) ?? '';
    t.match(
      line,
      /CRI-O does not read \/etc\/containers\/registries\.conf\.d: after a reload that reached it, a pull of offline-bundle-probe\.invalid\/config-check:[0-9a-f]{12} never reached the mirror 127\.0\.0\.1:\d+ that \/etc\/containers\/registries\.conf\.d\/offline-bundle-probe\.conf names/,
      'names the directory and what was seen',
    );
    t.match(line, /another --registries-conf-dir \(CONTAINER_REGISTRIES_CONF_DIR\)/, 'the setting');
    t.match(
      line,
      /CRI-O's reload failed \(.*journalctl -u crio shows "Unable to reload configuration"/,
      'a failed reload named as a cause',
    );
    t.match(line, /set paths\.registriesDropInDir to the directory it reads/, 'the fix');
    const status = await n.status();
    t.equal(
      status.conditions.find((c: any) => c.type === 'Failed')?.reason,
      'RuntimeIgnoresMirror',
    );
    t.same(await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []), [], 'nothing staged');
    t.same(await n.dropIns(), [], 'no mirror, probe or pins drop-in left');
    const pulls = (await n.crio.events()).filter((e: any) => e.event === 'pull');
    t.same(
      pulls.map((e: any) => e.ref.split(':')[0]),
      ['offline-bundle-probe.invalid/config-check'],
      'the probe was the only pull',
    );
  },
);

t.test(
  'not checked, in one log line: a CRI-O before 1.28 (no pinned_images in its running config; CRI-O stand-in)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-crio-cfg-old-');
    const root = join(dir, 'node');
    const files = await crioFiles(root);
    const crio = await startCrioStandin(t, { ...files, noPinSupport: true });
    const keys = await keygen(dir);
    const config = await loadConfig(
      await crioNodeConfig(root, keys.pub, { reload: crio.reloadCommand }),
    );
    const lines: string[] = [];
    const target = new CrioTarget(
      config,
      createLogger({ write: (l: string) => lines.push(l) } as any),
    );
    t.teardown(() => target.close());
    await t.resolves(target.checkConfig(), 'not refused');
    t.match(
      lines.join('\n'),
      /no pinned_images after the reload \(a CRI-O before 1\.28, reload\.command did not reach it, or its reload failed: journalctl -u crio\): whether it applies \S+ is not checked/,
    );
    t.same(await readdir(join(root, 'etc/crio/crio.conf.d')), [], 'the probe drop-in is gone');
  },
);

t.test(
  'GET /config is bounded (a socket that is not CRI-O: too large an answer, no answer)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-crio-cfg-bounds-');
    const socket = join(dir, 'crio.sock');
    const server = createServer((req, res) => {
      if (req.url === '/config') res.end('x'.repeat(CRIO_CONFIG_MAX_BYTES + 1));
      // /info: never answers
    });
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    t.teardown(() => {
      server.closeAllConnections();
      server.close();
    });
    await t.rejects(
      crioRunningConfig(socket),
      new RegExp(`GET /config answered more than ${CRIO_CONFIG_MAX_BYTES} bytes`),
      `over ${CRIO_CONFIG_MAX_BYTES} bytes: refused`,
    );
    await t.rejects(
      crioInfoGet(socket, '/info', 300),
      /GET \/info was not answered in full within 300 ms/,
      'no answer: a timeout',
    );
  },
);

const runningPins = async (socket: string) =>
  /^pinned_images = (.*)$/m.exec(await crioRunningConfig(socket))?.[1] ?? '';

t.test(
  "an agent killed mid-probe (CRI-O stand-in): the next start takes the probe pin out, rebuilds our pins from ours and the MCO's current ones, removes temp files, and reloads",
  async (t) => {
    // the reload command hangs after its SIGHUP: the agent is killed with the probe's files in place
    const n = await node(t, 'ob-crio-cfg-kill-', {}, { reloadThen: 'sleep 60' });
    const cfg = await loadConfig(n.config);
    await mkdir(cfg.paths.stateDir, { recursive: true });
    await writeFile(
      join(cfg.paths.stateDir, 'crio-pins.json'),
      JSON.stringify({ pins: ['quay.io/acme/ours:1'] }),
    );
    const agent = spawn(process.execPath, [AGENT, 'load', n.bundle, '--config', n.config], {
      stdio: 'ignore',
      detached: true,
    });
    t.teardown(() => {
      try {
        process.kill(-agent.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    });
    await n.crio.waitForEvent(
      (e: any) => e.event === 'reload' && e.pinnedImages.some((p: string) => PROBE.test(p)),
    );
    process.kill(-agent.pid!, 'SIGKILL');
    await new Promise((r) => agent.once('exit', r));
    t.match(await readFile(n.pinsFile, 'utf8'), PROBE, 'killed: our pins file holds the probe pin');
    t.match(await runningPins(n.crio.socket), PROBE, 'and CRI-O runs with it');
    // meanwhile the MCO changed its pins, and an earlier kill left a temp copy CRI-O's walk reads
    await writeFile(
      join(n.root, 'etc/crio/crio.conf.d/50-pinned-images'),
      '[crio.image]\npinned_images = ["quay.io/mco/new:2"]\n',
    );
    const temp = join(n.root, 'etc/crio/crio.conf.d/.offline-bundle-pins.conf.4242.0badcafe.tmp');
    await writeFile(temp, '[crio.image]\npinned_images = ["quay.io/stale/only:0"]\n');
    const staged = join(
      n.root,
      'etc/crio/..offline-bundle-pins.conf.4242.0badcafe.tmp.4242.0badcafe.tmp',
    );
    await writeFile(staged, '');
    await n.writeConfig();
    const target = await n.target();
    await target.cleanup();
    // SIGHUP returns at once, CRI-O reloads a moment later
    await n.crio.waitForEvent(
      (e: any) => e.event === 'reload' && e.pinnedImages.includes('quay.io/mco/new:2'),
      0,
      10_000,
    );
    const after = await readFile(n.pinsFile, 'utf8');
    t.notMatch(after, PROBE, 'no probe pin in our pins file');
    t.match(after, /"quay\.io\/acme\/ours:1"/, 'ours kept');
    t.match(
      after,
      /"quay\.io\/mco\/new:2"/,
      "the MCO's current pins taken, not hidden behind the probe-time copy",
    );
    t.same(
      (await n.dropIns()).sort(),
      ['50-pinned-images', 'offline-bundle-pins.conf'],
      'the probe mirror and the temp file are gone',
    );
    t.same(
      (await readdir(join(n.root, 'etc/crio'))).sort(),
      ['crio.conf', 'crio.conf.d'],
      "and a staged copy's temp beside crio.conf.d",
    );
    const pins = await runningPins(n.crio.socket);
    t.notMatch(pins, PROBE, 'CRI-O was reloaded: its running pins hold no probe pin');
    t.match(pins, /quay\.io\/mco\/new:2/, "and hold the MCO's current pins");
  },
);

t.test(
  'a probe cleaned on disk whose reload never came (CRI-O stand-in): the next start reloads because CRI-O still shows a probe pin',
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-unreloaded-');
    await writeFile(
      n.pinsFile,
      '# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.\n[crio.image]\npinned_images = ["offline-bundle-probe.invalid/config-check:0123456789ab"]\n',
    );
    t.equal((await n.crio.reload()).outcome, 'ok');
    await writeFile(
      n.pinsFile,
      '# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.\n[crio.image]\npinned_images = []\n',
    );
    await (await n.target()).cleanup();
    await n.crio.waitForEvent((e: any) => e.event === 'reload', 1, 10_000);
    t.notMatch(
      await runningPins(n.crio.socket),
      PROBE,
      'reloaded: the probe pin is gone from CRI-O',
    );
  },
);

t.test(
  "the probe writes the file's entries ∪ ours ∪ the probe pin, and restore puts the file back and reloads (CRI-O stand-in)",
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-restore-');
    // an entry only the file has (written by an earlier release of the agent): the probe must not drop it meanwhile
    const text =
      '# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.\n[crio.image]\npinned_images = ["quay.io/acme/kept:1"]\n';
    await writeFile(n.pinsFile, text);
    const target = await n.target();
    // CRI-O's crio.conf.d walk reads every file, dot and .tmp ones too: no other name may appear there, even for a moment
    const seenNames = new Set<string>();
    const watcher = watch(join(n.root, 'etc/crio/crio.conf.d'), (_e, name) => {
      if (name) seenNames.add(String(name));
    });
    await t.resolves(target.checkConfig(undefined, 10_000), 'the check passes');
    watcher.close();
    t.same(
      [...seenNames],
      ['offline-bundle-pins.conf'],
      "the probe's and the restore's writes: no temp file in crio.conf.d",
    );
    t.equal(await readFile(n.pinsFile, 'utf8'), text, 'our pins file is back byte for byte');
    await n.crio.waitForEvent((e: any) => e.event === 'reload', 1, 10_000);
    const reloads = (await n.crio.events()).filter((e: any) => e.event === 'reload');
    t.equal(
      reloads.length,
      2,
      "two reloads: the probe's and the one after its files were put back",
    );
    t.ok(
      reloads[0].pinnedImages.includes('quay.io/acme/kept:1') &&
        reloads[0].pinnedImages.some((p: string) => PROBE.test(p)),
      "during the probe CRI-O kept the file's entry beside the probe pin",
    );
    t.same(reloads[1].pinnedImages, ['quay.io/acme/kept:1'], "after it: the file's list");
    t.match(
      await runningPins(n.crio.socket),
      /^\[ "quay\.io\/acme\/kept:1" \]$/,
      'CRI-O runs with the restored list',
    );
  },
);

t.test(
  'a failed reload (a crio.conf.d file CRI-O cannot load; CRI-O stand-in): refused naming the failed reload and journalctl',
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-badfile-');
    t.equal(
      (await n.crio.reload()).outcome,
      'ok',
      'a reload once set pinned_images (as on any node the agent pinned on)',
    );
    await writeFile(
      join(n.root, 'etc/crio/crio.conf.d/10-bad.conf'),
      '[crio.image]\npause_image = 42\n',
    );
    const target = await n.target();
    const err: any = await target.checkConfig(undefined, 1500).catch((e) => e);
    t.equal(err?.reason, 'RuntimeIgnoresMirror');
    t.match(
      err?.message,
      /CRI-O's reload failed \(a bad file in its config stops it: journalctl -u crio shows "Unable to reload configuration" and the file\)/,
      'the failed reload is named as a cause',
    );
    t.match(err?.message, /fix the file journalctl names/, 'and its fix');
    t.equal(
      (await n.crio.events()).filter((e: any) => e.event === 'reload')[1]?.outcome,
      'error',
      "the stand-in's reload did fail",
    );
    t.same((await n.dropIns()).sort(), ['10-bad.conf'], 'the probe files are gone');
  },
);

t.test(
  'a reload slower than 5 s is waited for; one slower than the settle window is refused as not confirmed (CRI-O stand-in with a slow reload)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-crio-cfg-slow-');
    const root = join(dir, 'node');
    const files = await crioFiles(root);
    // a file sets pinned_images (as ours does on any node the agent pinned on): the key shows from the start
    await writeFile(files.crioConf, '[crio]\n[crio.image]\npinned_images = []\n');
    const slow = await startCrioStandin(t, { ...files, reloadDelayMs: 6_000 });
    const cfg = await crioNodeConfig(root, (await keygen(dir)).pub, { reload: slow.reloadCommand });
    const lines: string[] = [];
    const target = new CrioTarget(
      await loadConfig(cfg),
      createLogger({ write: (l: string) => lines.push(l) } as any),
    );
    t.teardown(() => target.close());
    const started = Date.now();
    await t.resolves(target.checkConfig(), 'a 6 s reload is waited for (the default window)');
    t.ok(Date.now() - started >= 6_000, `it took the reload's time (${Date.now() - started} ms)`);
    const err: any = await target.checkConfig(undefined, 1_000).catch((e) => e);
    t.equal(err?.reason, 'RuntimeIgnoresMirror');
    t.match(
      err?.message,
      /was not confirmed within 1 s: .*crio was still busy with an earlier reload/,
      'the words say the pin was not confirmed in time and name a busy CRI-O',
    );
  },
);

t.test(
  "a stop (the load's abort signal) ends the check at once, files put back and CRI-O reloaded (CRI-O stand-in started with another --config-dir)",
  async (t) => {
    const n = await node(t, 'ob-crio-cfg-abort-', { crioDropInDir: 'etc/crio/other.conf.d' });
    const target = await n.target();
    const stop = new AbortController();
    setTimeout(() => stop.abort(new Error('SIGTERM')), 1_000);
    const started = Date.now();
    const err: any = await target.checkConfig(stop.signal).catch((e) => e);
    t.equal(err?.reason, 'Interrupted', 'Interrupted, not a refusal');
    t.ok(
      Date.now() - started < 5_000,
      `ended within 5 s of the start, not after the 30 s window (${Date.now() - started} ms)`,
    );
    t.same(await n.dropIns(), [], 'no probe file left');
    await t.resolves(
      n.crio.waitForEvent((e: any) => e.event === 'reload', 1, 10_000),
      'a reload after the files were put back',
    );
  },
);

t.test(
  'the probe listener counts only a registry client: TLS ClientHello or GET /v2/, not any connection',
  async (t) => {
    const send = async (bytes: Buffer | null) => {
      const l = await startMirrorProbeListener();
      const [host, port] = l.address.split(':');
      await new Promise<void>((resolve) => {
        const c = connect(Number(port), host!, () => {
          if (bytes) c.write(bytes);
          else c.end();
        });
        c.on('error', () => resolve()).on('close', () => resolve());
        setTimeout(() => {
          c.destroy();
          resolve();
        }, 3_000);
      });
      const reached = l.reached();
      await l.close();
      return reached;
    };
    t.equal(await send(null), false, 'a connection that sends nothing');
    t.equal(await send(Buffer.from('hello there\r\n')), false, 'one that sends something else');
    t.equal(
      await send(Buffer.from('GET /other HTTP/1.1\r\n\r\n')),
      false,
      'an HTTP request for another path',
    );
    t.equal(
      await send(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00])),
      true,
      'a TLS ClientHello (containers/image tries HTTPS first)',
    );
    t.equal(
      await send(Buffer.from('GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n')),
      true,
      'its plain-HTTP ping (insecure = true)',
    );
  },
);

t.test(
  'GET /config has a whole-request bound: a socket trickling a byte every 100 ms is cut at it (stand-in socket)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-crio-cfg-trickle-');
    const socket = join(dir, 'crio.sock');
    const server = createNetServer((c) => {
      c.write(
        'HTTP/1.1 200 OK\r\nContent-Type: application/toml\r\nContent-Length: 100000\r\n\r\n',
      );
      const tick = setInterval(() => c.write('x'), 100);
      c.on('close', () => clearInterval(tick)).on('error', () => clearInterval(tick));
    });
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    t.teardown(() => server.close());
    const started = Date.now();
    const outcome = await Promise.race([
      crioInfoGet(socket, '/config', 700).then(
        () => 'answered',
        (e: Error) => e.message,
      ),
      new Promise((r) => setTimeout(() => r('still reading after 3 s'), 3_000)),
    ]);
    t.match(outcome, /GET \/config was not answered in full within 700 ms/, 'cut at the bound');
    t.ok(
      Date.now() - started < 1_500,
      `within the bound and a little (${Date.now() - started} ms)`,
    );
  },
);

t.test(
  'refusals quote what CRI-O and the directory hold: quoted, no control bytes, each cut, at most 3 named',
  async (t) => {
    const hostile = ['evil\x1b[2J\nname', 'x'.repeat(5000), 'b\u202eidi', 'four', 'five'];
    const line = ignoredCrioDirMessage({
      dir: '/etc/crio/crio.conf.d',
      file: '/etc/crio/crio.conf.d/offline-bundle-pins.conf',
      entry: 'offline-bundle-probe.invalid/config-check:0',
      seen: hostile,
      socket: '/run/crio/crio.sock',
      reload: ['systemctl', 'reload', 'crio'],
      later: hostile,
      settleMs: 30_000,
    });
    t.notMatch(
      line,
      /[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/,
      'no control or bidi characters',
    );
    t.match(
      line,
      /pinned_images = \["evil\\x1b\[2J\\x0aname", "x{200}…" \(5000 characters\), "b\\u202eidi", … 2 more\]/,
      'pins quoted, escaped, cut, counted',
    );
    t.match(
      line,
      /; \["evil\\x1b\[2J\\x0aname", "x{200}…" \(5000 characters\), "b\\u202eidi", … 2 more\] \(sorting after/,
      'file names too',
    );
    t.ok(line.length < 2_000, `one bounded line (${line.length} characters)`);
  },
);
