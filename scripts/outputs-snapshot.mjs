#!/usr/bin/env node
// The before/after check for refactors that must not change behaviour (issue 26): what
// `bundle inspect/verify/extract` and a `bundle-agent load` print, their exit codes, and the
// status a load leaves, on one fixed bundle and a few broken copies of it, with temp paths,
// times and rates masked. Run it with the old and the new checkout's binaries on the same
// fixtures and diff the two outputs:
//
//   node scripts/outputs-snapshot.mjs fixtures DIR          # once: a bundle, keys, broken copies
//   node scripts/outputs-snapshot.mjs run DIR OLD_REPO > old.json
//   node scripts/outputs-snapshot.mjs run DIR NEW_REPO > new.json && diff old.json new.json
//
// Needs root (the load runs a private containerd). Binaries come from REPO/builder/bin and
// REPO/agent/bin, so each checkout must be built (`pnpm build`).
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startRegistry } from '../test/helpers/registry.mjs';
import { pushImage, releaseFiles } from '../test/helpers/images.mjs';
import { startContainerd } from '../test/helpers/containerd.mjs';

const [mode, dir, repo] = process.argv.slice(2);
if (!['fixtures', 'run'].includes(mode) || !dir || (mode === 'run' && !repo)) {
  console.error('usage: outputs-snapshot.mjs fixtures DIR | run DIR REPO');
  process.exit(2);
}
const SELF = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const fx = (name) => path.join(dir, name);

function bin(root, which) {
  return path.join(
    root,
    which === 'bundle' ? 'builder/bin/bundle.js' : 'agent/bin/bundle-agent.js',
  );
}

/** The release (its payload of two images) and a workload, pushed to the test registry. */
async function pushImages(reg) {
  const payload = {};
  for (const name of ['cli', 'etcd']) {
    const img = await pushImage(
      {
        tag: name,
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [
              { 'etc/os-release': 'snapshot base\n' },
              { [`usr/bin/${name}`]: `#!/bin/sh\necho ${name}\n` },
            ],
          },
        ],
      },
      `${reg.host}/openshift-release-dev/ocp-v4.0-art-dev:${name}`,
    );
    payload[name] = `quay.io/openshift-release-dev/ocp-v4.0-art-dev@${img.digest}`;
  }
  await pushImage(
    {
      tag: 'rel',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [releaseFiles({ version: '4.14.39', previous: ['4.14.38'], images: payload })],
        },
      ],
    },
    `${reg.host}/openshift-release-dev/ocp-release:4.14.39-x86_64`,
  );
  await pushImage(
    {
      tag: 'v2',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'srv/app': 'workload v2\n' }] }],
    },
    `${reg.host}/acme/workload:v2`,
  );
}

/** Keys, and good.bundle built from the registry through a registries.conf that mirrors to it. */
function createGoodBundle(reg) {
  const conf = fx('mirror.conf');
  writeFileSync(
    conf,
    `[[registry]]\nprefix = "quay.io/openshift-release-dev"\nlocation = "${reg.host}/openshift-release-dev"\ninsecure = true\n\n[[registry]]\nprefix = "registry.example.com/acme"\nlocation = "${reg.host}/acme"\ninsecure = true\n`,
  );
  const b = bin(SELF, 'bundle');
  execFileSync(process.execPath, [b, 'keygen', '--out', fx('factory')]);
  execFileSync(process.execPath, [b, 'keygen', '--out', fx('other')]);
  execFileSync(process.execPath, [
    b,
    'create',
    '--quiet',
    '--release',
    'quay.io/openshift-release-dev/ocp-release:4.14.39-x86_64',
    '--image',
    'registry.example.com/acme/workload:v2',
    '--registries-conf',
    conf,
    '--arch',
    'amd64',
    '--key',
    fx('factory.key'),
    '--cache',
    fx('cache'),
    '-o',
    fx('good.bundle'),
  ]);
}

/** Copies of good.bundle cut short, with a byte flipped, or with bytes after its end; and a text file. */
function writeBrokenCopies() {
  const good = readFileSync(fx('good.bundle'));
  copyFileSync(fx('good.bundle'), fx('truncated.bundle'));
  truncateSync(fx('truncated.bundle'), Math.floor(good.length * 0.6));
  for (const [name, at] of [
    ['flipped-head.bundle', 40],
    ['flipped-middle.bundle', Math.floor(good.length / 2)],
    ['flipped-tail.bundle', good.length - 20],
  ]) {
    const copy = Buffer.from(good);
    copy[at] ^= 0xff;
    writeFileSync(fx(name), copy);
  }
  writeFileSync(fx('appended.bundle'), Buffer.concat([good, Buffer.from('trailing bytes')]));
  writeFileSync(fx('not-a-bundle.txt'), 'registry.example.com/acme/workload:v2\n');
}

async function fixtures() {
  mkdirSync(dir, { recursive: true });
  const reg = await startRegistry();
  try {
    await pushImages(reg);
    createGoodBundle(reg);
  } finally {
    await reg.stop();
  }
  writeBrokenCopies();
  console.log(`fixtures in ${dir}`);
}

// Masks what differs between two runs of the same code: temp paths, times, rates, pids.
function mask(text) {
  return text
    .replaceAll(dir, '<FIXTURES>')
    .replace(/\/tmp\/ob-snap-[A-Za-z0-9]+/g, '<TMP>')
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<TIME>')
    .replace(/\b\d+(\.\d+)? ?(ms|s|MB\/s|MiB\/s|KB\/s|kB\/s|GB\/s)\b/g, '<N $2>')
    .replace(
      /"(durationMs|elapsedMs|ms|seconds|rate|bytesPerSecond|pid|bootId|startTicks|heartbeat\w*|at|since|startedAt|finishedAt|lastTransitionTime|updatedAt|time)": ?[^,}\n]+/g,
      '"$1": <MASKED>',
    )
    .replace(/\d+(\.\d+)? [KMGT]?B free/g, '<N> free')
    .replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<PORT>');
}

function run(root, which, args) {
  const r = spawnSync(process.execPath, [bin(root, which), ...args], {
    encoding: 'utf8',
    env: { ...process.env, NO_COLOR: '1' },
    timeout: 300_000,
  });
  return { args: args.map(mask), code: r.status, stdout: mask(r.stdout), stderr: mask(r.stderr) };
}

function tree(root) {
  const out = {};
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) =>
      a.name.localeCompare(b.name),
    )) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else
        out[path.relative(root, p)] =
          `${statSync(p).size} ${createHash('sha256').update(readFileSync(p)).digest('hex').slice(0, 16)}`;
    }
  };
  walk(root);
  return out;
}

async function load(root, tmp) {
  const node = path.join(tmp, 'node');
  mkdirSync(path.join(node, 'etc/bundle-agent/keys'), { recursive: true });
  copyFileSync(fx('factory.pub'), path.join(node, 'etc/bundle-agent/keys/factory.pub'));
  const config = path.join(node, 'etc/bundle-agent/config.yaml');
  writeFileSync(
    config,
    `root: ${node}\nnodeName: snapshot-node\nruntime: containerd\narch: amd64\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\nversion:\n  current: "4.14.38"\nspace:\n  reserveBytes: 0\n`,
  );
  const ctd = await startContainerd(30_000, {
    certsDir: path.join(node, 'etc/containerd/certs.d'),
    socket: path.join(node, 'run/containerd/containerd.sock'),
  });
  try {
    const steps = {};
    steps.loadBroken = run(root, 'agent', [
      'load',
      fx('flipped-middle.bundle'),
      '--config',
      config,
    ]);
    steps.loadNotBundle = run(root, 'agent', ['load', fx('not-a-bundle.txt'), '--config', config]);
    steps.load = run(root, 'agent', ['load', fx('good.bundle'), '--config', config]);
    steps.status = run(root, 'agent', ['status', '--config', config, '--json']);
    steps.releases = run(root, 'agent', ['releases', 'list', '--config', config, '--json']);
    // the agent log on stderr carries times and ids: only its event names are compared
    steps.load.stderr = steps.load.stderr
      .split('\n')
      .map((l) => /event=(\S+)/.exec(l)?.[1])
      .filter(Boolean)
      .join(' ');
    return steps;
  } finally {
    await ctd.stop();
  }
}

async function snapshot() {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'ob-snap-'));
  try {
    const key = ['--key', fx('factory.pub')];
    const out = { bundle: {} };
    out.bundle.inspectJson = run(repo, 'bundle', ['inspect', fx('good.bundle'), '--json']);
    out.bundle.inspect = run(repo, 'bundle', ['inspect', fx('good.bundle')]);
    out.bundle.verify = run(repo, 'bundle', ['verify', fx('good.bundle'), ...key, '--quiet']);
    out.bundle.verifyJson = run(repo, 'bundle', [
      'verify',
      fx('good.bundle'),
      ...key,
      '--json',
      '--quiet',
    ]);
    out.bundle.wrongKey = run(repo, 'bundle', [
      'verify',
      fx('good.bundle'),
      '--key',
      fx('other.pub'),
      '--quiet',
    ]);
    out.bundle.wrongDigest = run(repo, 'bundle', [
      'verify',
      fx('good.bundle'),
      ...key,
      '--digest',
      `sha256:${'0'.repeat(64)}`,
      '--quiet',
    ]);
    for (const f of [
      'truncated.bundle',
      'flipped-head.bundle',
      'flipped-middle.bundle',
      'flipped-tail.bundle',
      'appended.bundle',
      'not-a-bundle.txt',
      'missing.bundle',
    ]) {
      out.bundle[`verify ${f}`] = run(repo, 'bundle', ['verify', fx(f), ...key, '--quiet']);
      out.bundle[`inspect ${f}`] = run(repo, 'bundle', ['inspect', fx(f)]);
    }
    const into = path.join(tmp, 'extracted');
    out.bundle.extract = run(repo, 'bundle', [
      'extract',
      fx('good.bundle'),
      into,
      ...key,
      '--quiet',
    ]);
    out.bundle.extractedTree = tree(into);
    out.bundle.extractBroken = run(repo, 'bundle', [
      'extract',
      fx('flipped-middle.bundle'),
      path.join(tmp, 'broken'),
      ...key,
      '--quiet',
    ]);
    out.agent = await load(repo, tmp);
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (mode === 'fixtures') await fixtures();
else await snapshot();
