// The build's breakdown (issue #45): with BUNDLE_PHASE_TIMES=FILE, `bundle create` writes where
// its time went, phase by phase, for the bench to print beside the peer's; without it nothing is
// written, and either way the bundle's bytes are the same.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-phases-');
const keys = await keygen(work, 'factory', 'ed25519');
const layer = randomBytes(3 * 1000 * 1000);
const img = await pushImage(
  {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'data/file': layer }] }],
  },
  `${reg.host}/phases/app:v1`,
);

interface PhaseFile {
  phases: Record<string, { wall?: number; cpu?: number; count: number; bytes?: number }>;
  process: { wall: number; cpu: number; mainThreadCpu?: number; threads: unknown[] };
}

async function create(name: string, env: Record<string, string>) {
  const out = path.join(work, `${name}.bundle`);
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--key',
      keys.key,
      '--version',
      '1',
      '--image',
      img.ref,
      '-o',
      out,
      '--cache',
      path.join(work, `cache-${name}`),
    ],
    { env: { SOURCE_DATE_EPOCH: '1700000000', ...env } },
  );
  t.equal(r.code, 0, r.stderr);
  return out;
}

t.test(
  'BUNDLE_PHASE_TIMES: every phase of a cold build is recorded, the bundle unchanged',
  async (t) => {
    const file = path.join(work, 'phases.json');
    const timed = await create('timed', { BUNDLE_PHASE_TIMES: file });
    const plain = await create('plain', {});
    t.ok(
      (await readFile(timed)).equals(await readFile(plain)),
      'the same bytes with and without the timings',
    );
    const names = (await readdir(work)).filter((n) => n.includes('phases'));
    t.same(names, ['phases.json'], 'one file, from the timed run only (no temp file left)');
    const got = JSON.parse(await readFile(file, 'utf8')) as PhaseFile;
    for (const name of [
      'start: process start and module loading',
      'start: key loading',
      'registry: resolve manifests',
      'registry reads: digest check',
      'registry reads: every blob fetched (wall)',
      'estimate: layers decompressed',
      'signing',
      'whole-file hash: its thread',
      'finishing: fsync, sidecar, rename',
    ]) {
      t.ok(got.phases[name] && got.phases[name].count > 0, `${name}: recorded`);
    }
    const { blobs } = await bundleJson(timed);
    const total = blobs.reduce((s, b) => s + b.size, 0);
    // the manifests are checked as they are read, apart; every other blob streams through the check
    const streamed = blobs
      .filter((b) => !/manifest|index/.test(b.mediaType))
      .reduce((s, b) => s + b.size, 0);
    t.equal(
      got.phases['registry reads: digest check']!.bytes,
      streamed,
      'every streamed byte checked against its digest, counted once',
    );
    const compressed = Object.entries(got.phases)
      .filter(([n]) => n.startsWith('compression: frames'))
      .reduce((s, [, p]) => s + (p.bytes ?? 0), 0);
    t.ok(
      compressed >= total,
      `every blob's bytes went through a compressor (${compressed} >= ${total})`,
    );
    t.equal(
      got.phases['whole-file hash: its thread']!.bytes,
      (await readFile(timed)).length,
      'the whole file hashed once',
    );
    t.ok(
      got.process.cpu > 0 && got.process.mainThreadCpu! > 0 && got.process.threads.length > 1,
      "the process's CPU, its main thread's and each thread's",
    );
  },
);
