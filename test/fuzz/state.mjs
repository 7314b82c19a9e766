#!/usr/bin/env node
// Seeded fuzzing of what the agent and its boot guard read back from the state directory
// (`pnpm fuzz:state`; test/fuzz/README.md): mutated agent-switch.json records, release records
// (and their file names), and the guard's agent-switch.pending / agent-switch.starts.
//
//   node test/fuzz/state.mjs [--count N] [--seed S] [--only I] [--json]
//
// Case i is kind i mod 3: switch (readAgentSwitch + settleAgentSwitch), release (readReleases +
// pruneReleases), guard (deploy/openshift/switch-guard.sh under /bin/sh). Invariants: no
// programming error (TypeError, RangeError) escapes; image.conf is only ever absent, unchanged or
// exactly the agent's drop-in for our repository by digest; nothing outside the state directory
// is removed; a release record used is named VERSION-ARCH.json for itself; the guard ends (10 s)
// with 0 or 1 and never an sh error. Exit 1 when anything was found.
import { spawnSync } from 'node:child_process';
import {
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  createLogger,
  isAgentImageByDigest,
  parseConfig,
  pendingMarker,
  pruneReleases,
  readAgentSwitch,
  readReleases,
  renderImageDropIn,
  settleAgentSwitch,
} from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { Rng } from './bundle.mjs';

const GUARD = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'deploy',
  'openshift',
  'switch-guard.sh',
);
const REPO = 'localhost/offline-bundle/bundle-agent';
const KINDS = ['switch', 'release', 'guard'];

const { values: opt } = parseArgs({
  options: {
    count: { type: 'string', default: '600' },
    seed: { type: 'string', default: '1' },
    only: { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});

const dg = (rng) => `sha256:${rng.bytes(32).toString('hex')}`;
/** Values a hostile state file may hold where a string, number or image is expected. */
function hostileValue(rng) {
  return rng.pick([
    () => `${REPO}@${dg(rng)}\n[Service]\nExecStartPre=/bin/sh -c 'id > /tmp/owned'`,
    () => 'evil.example.com/backdoor:latest',
    () => `${REPO}:0.5.0`,
    () => `${REPO}@sha256:${'a'.repeat(63)}`,
    () => `${REPO}@${dg(rng)} `,
    () => `../../../../${'x/'.repeat(rng.int(5))}victim`,
    () => '/etc/passwd',
    () => 'a'.repeat(rng.pick([0, 1, 64, 65, 129, 5000])),
    () => '0'.repeat(rng.int(30)) + String(rng.int(1000)),
    () => '9'.repeat(rng.range(10, 40)),
    () => String(-rng.int(1000)),
    () => '\u0000\u001b[2J\r\n',
    () => rng.int(1e9),
    () => -1,
    () => 1e308,
    () => null,
    () => true,
    () => [],
    () => ({}),
    () => rng.bytes(rng.int(40)).toString('latin1'),
  ])();
}

function mutateObject(rng, obj) {
  const doc = structuredClone(obj);
  const n = rng.range(1, 3);
  for (let k = 0; k < n; k++) {
    const paths = [];
    const walk = (o, p) => {
      for (const key of Object.keys(o)) {
        paths.push([...p, key]);
        if (o[key] && typeof o[key] === 'object' && !Array.isArray(o[key]))
          walk(o[key], [...p, key]);
      }
    };
    walk(doc, []);
    const p = rng.pick(paths);
    let parent = doc;
    for (const key of p.slice(0, -1)) parent = parent[key];
    const last = p[p.length - 1];
    if (rng.chance(0.15)) delete parent[last];
    else parent[last] = hostileValue(rng);
  }
  return doc;
}

const silentLog = () => createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
const runtime = {
  pin: async () => undefined,
  unpin: async () => undefined,
  pinnedRefs: async () => new Set(),
  inspector: async () => undefined,
};

async function node(dir) {
  const root = path.join(dir, 'node');
  const stateDir = path.join(root, 'var/lib/bundle-agent');
  const dropInDir = path.join(root, 'etc/containers/systemd/bundle-agent.container.d');
  await mkdir(stateDir, { recursive: true });
  await mkdir(dropInDir, { recursive: true });
  await mkdir(path.join(root, 'etc/bundle-agent'), { recursive: true });
  const text = `runtime: crio\ntrust:\n  digest: sha256:${'0'.repeat(64)}\nversion:\n  current: "4.15.0"\npaths:\n  stateDir: ${stateDir}\n  upgradeDir: ${path.join(root, 'var/lib/upgrade')}\n  statusFile: ${path.join(root, 'run/status.json')}\nselfUpgrade:\n  mode: quadlet\n  dropInDir: ${dropInDir}\n  confirmMinutes: 10\n  daemonReload: ["true"]\n  restart: ["true"]\n  scheduleRollback: []\n`;
  return {
    root,
    stateDir,
    dropInDir,
    dropIn: path.join(dropInDir, 'image.conf'),
    config: parseConfig(text, path.join(root, 'etc/bundle-agent/config.yaml')),
  };
}

const isBug = (err) =>
  err instanceof TypeError || err instanceof RangeError || err instanceof ReferenceError;

/** image.conf must be absent, what it was, or exactly our drop-in for our repository by digest. */
async function dropInOk(file, before) {
  const text = await readFile(file, 'utf8').catch(() => undefined);
  if (text === undefined || text === before) return undefined;
  const image = /^Image=(.*)$/m.exec(text)?.[1];
  if (isAgentImageByDigest(image) && text === renderImageDropIn(image)) return undefined;
  return `image.conf became ${JSON.stringify(text.slice(0, 300))}`;
}

async function switchCase(rng, dir) {
  const n = await node(dir);
  const from = { version: '0.5.0', image: `${REPO}@${dg(rng)}`, dropIn: rng.chance(0.7) };
  const toDigest = dg(rng);
  const base = {
    state: 'pending',
    written: rng.chance(0.8),
    from,
    to: { version: '0.6.0', image: `${REPO}@${toDigest}`, digest: toDigest },
    at: new Date(Date.now() - rng.int(7200) * 1000).toISOString(),
    confirmSeconds: 600,
  };
  const rec = mutateObject(rng, base);
  const before = renderImageDropIn(`${REPO}@${rng.chance(0.7) ? toDigest : dg(rng)}`);
  await writeFile(n.dropIn, before);
  await writeFile(path.join(n.stateDir, 'agent-switch.json'), JSON.stringify(rec));
  await writeFile(pendingMarker(n.stateDir), `${toDigest}\n600\n-\n`);
  const got = await readAgentSwitch(n.stateDir).catch((err) => ({ threw: err }));
  if (got?.threw) return isBug(got.threw) ? `readAgentSwitch threw ${got.threw}` : undefined;
  if (
    got &&
    got.from.dropIn &&
    got.from.image !== undefined &&
    !isAgentImageByDigest(got.from.image)
  )
    return `accepted from.image ${JSON.stringify(got.from.image)}`;
  if (got && got.to.image !== `${REPO}@${got.to.digest}`)
    return `accepted to.image ${JSON.stringify(got.to.image)}`;
  const ctx = {
    config: n.config,
    log: silentLog(),
    tracker: new StatusTracker(emptyStatus('node-a')),
    runtime,
    agentVersion: rng.pick(['0.5.0', '0.6.0', '0.4.0']),
  };
  try {
    await settleAgentSwitch(ctx, Date.now());
  } catch (err) {
    if (isBug(err)) return `settleAgentSwitch threw ${err}`;
  }
  return dropInOk(n.dropIn, before);
}

async function releaseCase(rng, dir) {
  const n = await node(dir);
  const releases = path.join(n.stateDir, 'releases');
  await mkdir(releases, { recursive: true });
  const outside = path.join(dir, 'outside');
  await mkdir(outside, { recursive: true });
  const sentinels = ['victim-amd64.json', 'x-amd64.json', '4.0.0-amd64.json'];
  for (const s of sentinels) await writeFile(path.join(outside, s), 'precious');
  const count = rng.range(1, 4);
  for (let k = 0; k < count; k++) {
    const version = rng.pick(['4.13.0', '4.14.2', '4.15.0', '4.16.0']);
    const base = {
      version,
      arch: 'amd64',
      refs: [`quay.io/x/y@${dg(rng)}`],
      loadedAt: '2026-11-20T00:00:00.000Z',
      ...(rng.chance(0.3)
        ? { layout: path.join(n.root, 'var/lib/upgrade', `${version}-amd64`) }
        : {}),
    };
    const rec = rng.chance(0.7) ? mutateObject(rng, base) : base;
    if (rng.chance(0.3) && typeof rec === 'object')
      rec.version = rng.pick([
        `../../../../../..${outside}/victim`,
        `${path.relative(releases, outside)}/x`,
        '4.0.0',
      ]);
    const name = rng.chance(0.6)
      ? `${version}-amd64.json`
      : rng.pick(['copy.json', `${version}-arm64.json`, `k${k}.json`]);
    await writeFile(path.join(releases, name), JSON.stringify(rec));
  }
  let recs;
  try {
    recs = await readReleases(n.stateDir);
  } catch (err) {
    return `readReleases threw ${err}`;
  }
  const names = new Set(await readdir(releases));
  for (const r of recs)
    if (!names.has(`${r.version}-${r.arch}.json`))
      return `a record used for ${JSON.stringify(`${r.version}-${r.arch}`)} is not named for itself`;
  let pruned;
  try {
    pruned = await pruneReleases(n.config, runtime);
  } catch (err) {
    if (isBug(err)) return `pruneReleases threw ${err}`;
  }
  for (const s of sentinels)
    if ((await readFile(path.join(outside, s), 'utf8').catch(() => '')) !== 'precious')
      return `${s} outside the state directory was removed or changed`;
  const left = new Set(await readdir(releases));
  for (const f of pruned?.forgotten ?? [])
    if (left.has(`${f.version}-${f.arch}.json`))
      return `${f.version}-${f.arch} said forgotten, its record still there`;
  return undefined;
}

async function guardCase(rng, dir) {
  const n = await node(dir);
  const bin = path.join(dir, 'bin');
  await mkdir(bin, { recursive: true });
  for (const cmd of ['systemctl', 'systemd-run'])
    await writeFile(path.join(bin, cmd), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  const digest = dg(rng);
  const line = (good) => (rng.chance(0.4) ? good : String(hostileValue(rng)));
  const marker = pendingMarker(n.stateDir);
  await writeFile(
    marker,
    `${rng.chance(0.9) ? digest : line(digest)}\n${line(String(rng.pick([60, 600, 6000])))}\n${line(rng.chance(0.5) ? `${REPO}@${dg(rng)}` : '-')}\n`,
  );
  const then = new Date(Date.now() - rng.int(3600) * 1000);
  await utimes(marker, then, then);
  const starts = path.join(n.stateDir, 'agent-switch.starts');
  const s = rng.int(4);
  if (s === 1) await writeFile(starts, `${line(String(rng.int(7)))}\n`);
  if (s === 2)
    await symlink(rng.pick(['/dev/zero', '/dev/null', path.join(dir, 'nowhere')]), starts);
  if (rng.chance(0.3))
    await symlink(path.join(dir, 'victim'), `${starts}.tmp`).catch(() => undefined);
  const before = renderImageDropIn(`${REPO}@${rng.chance(0.8) ? digest : dg(rng)}`);
  await writeFile(n.dropIn, before);
  const r = spawnSync('/bin/sh', [GUARD, n.stateDir, n.dropInDir, 'bundle-agent'], {
    env: { PATH: `${bin}:/usr/bin:/bin` },
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (r.signal) return 'the guard did not end within 10 s';
  if (r.status !== 0 && r.status !== 1)
    return `the guard exited ${r.status}: ${r.stderr.trim().slice(0, 300)}`;
  if (/Illegal number|arithmetic|bad number|not found/i.test(r.stderr))
    return `the guard said ${JSON.stringify(r.stderr.trim().slice(0, 300))}`;
  if ((await readFile(path.join(dir, 'victim'), 'utf8').catch(() => undefined)) !== undefined)
    return 'the guard wrote through a symlink';
  return dropInOk(n.dropIn, before);
}

const CASES = { switch: switchCase, release: releaseCase, guard: guardCase };
const count = Number(opt.count);
const indices =
  opt.only !== undefined ? [Number(opt.only)] : Array.from({ length: count }, (_, i) => i);
const findings = [];
const perKind = Object.fromEntries(KINDS.map((k) => [k, 0]));
const started = Date.now();
for (const i of indices) {
  const kind = KINDS[i % KINDS.length];
  const dir = await mkdtemp(path.join(tmpdir(), 'ob-fuzz-state-'));
  try {
    const why = await CASES[kind](new Rng(opt.seed, 'state', i), dir).catch(
      (err) => `the harness failed: ${err?.stack ?? err}`,
    );
    perKind[kind]++;
    if (why)
      findings.push({
        case: i,
        kind,
        why,
        rerun: `node test/fuzz/state.mjs --seed ${opt.seed} --only ${i}`,
      });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
const summary = {
  seed: opt.seed,
  cases: indices.length,
  perKind,
  findings,
  seconds: Math.round((Date.now() - started) / 100) / 10,
};
if (opt.json) process.stdout.write(JSON.stringify(summary) + '\n');
else {
  for (const f of findings)
    process.stderr.write(`case ${f.case} (${f.kind}): ${f.why}\n  ${f.rerun}\n`);
  process.stderr.write(
    `fuzz state: ${indices.length} cases (${KINDS.map((k) => `${perKind[k]} ${k}`).join(', ')}), ${findings.length} findings, ${summary.seconds} s\n`,
  );
}
process.exitCode = findings.length ? 1 : 0;
