// The agent's registry under load: 64 concurrent clients for a bounded time against
// `bundle-agent serve` over a bundle file (random access through the seek index, every blob
// re-hashed as served) and over an extracted layout. Every full blob must hash to its digest,
// every Range answer must be the exact bytes, no request may fail, and the server's RSS must
// stay flat. Traffic is loopback only; the loop stops by itself (LOAD_SECONDS, default 8 per source).
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { AGENT, BUNDLE, keygen, run } from '../agent/fixtures.js';

const CLIENTS = 64;
const SECONDS = Number(process.env.LOAD_SECONDS ?? 8);
const sha = (b: Buffer) => 'sha256:' + createHash('sha256').update(b).digest('hex');

async function serve(t: any, args: string[]): Promise<{ address: string; pid: number }> {
  const child = spawn(process.execPath, [AGENT, 'serve', ...args, '--json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    child.kill('SIGTERM');
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d;
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  return { address: JSON.parse(line).address, pid: child.pid! };
}

async function rssBytes(pid: number): Promise<number> {
  const m = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

interface Blob {
  digest: string;
  size: number;
  repo: string;
}

t.test('the registry under 64 concurrent clients', async (t) => {
  const dir = await tmpdir(t, 'ob-load-');
  const keys = await keygen(dir);
  const layout = join(dir, 'src');
  // a 6 MiB random layer spans two 4 MiB frames; small ones take the single-buffer path
  await writeImageLayout(layout, {
    tag: 'a',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [
          { 'a.txt': 'a' },
          { 'big.bin': randomBytes(6 * 1024 * 1024) },
          { 'mid.bin': randomBytes(300_000) },
        ],
      },
    ],
  });
  await writeImageLayout(layout, {
    tag: 'b',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'b.txt': 'b' }] }],
  });
  const file = join(dir, 'load.bundle');
  const c = await run(BUNDLE, [
    'create',
    '--quiet',
    '--version',
    '1.0',
    '--image',
    `oci:${layout}:a=quay.io/acme/app:v1`,
    '--image',
    `oci:${layout}:b=quay.io/acme/tool:v1`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    file,
  ]);
  t.equal(c.code, 0, c.stderr);
  const manifest = JSON.parse(
    execFileSync('sh', ['-c', `zstd -dc '${file}' | tar -xO bundle.json`]).toString(),
  );
  const repos = manifest.images.map((i: any) => 'quay.io/' + i.repository.slice('quay.io/'.length));
  const blobs: Blob[] = manifest.blobs.map((b: any) => ({
    digest: b.digest,
    size: b.size,
    repo: repos[0],
  }));
  const extracted = join(dir, 'layout');
  t.equal((await run(BUNDLE, ['extract', file, extracted, '--key', keys.pub, '--quiet'])).code, 0);

  for (const [name, args] of [
    ['a bundle file (seek index)', [file, '--key', keys.pub]],
    ['an extracted layout', [extracted, '--key', keys.pub]],
  ] as const) {
    t.test(name, async (t) => {
      const { address, pid } = await serve(t, [...args]);
      const base = `http://${address}/v2/`;
      const get = async (path: string, headers: Record<string, string> = {}) => {
        const r = await fetch(base + path, { headers });
        const body = Buffer.from(await r.arrayBuffer());
        return { status: r.status, body };
      };
      // the reference bytes, each checked against its signed digest once
      const bytes = new Map<string, Buffer>();
      for (const b of blobs) {
        const r = await get(`${b.repo}/blobs/${b.digest}`);
        t.equal(sha(r.body), b.digest, `reference copy of ${b.digest.slice(0, 19)}`);
        bytes.set(b.digest, r.body);
      }

      const stats = {
        requests: 0,
        bytes: 0,
        errors: [] as string[],
        full: 0,
        range: 0,
        manifest: 0,
      };
      const rss: number[] = [];
      const sampler = setInterval(() => {
        rssBytes(pid).then(
          (v) => rss.push(v),
          () => undefined,
        );
      }, 250);
      // mulberry32: seeded, so a failure reproduces
      let seed = 0x9e3779b9;
      const rand = (n: number) => {
        seed = (seed + 0x6d2b79f5) >>> 0;
        let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
        return Math.floor((((x ^ (x >>> 14)) >>> 0) / 4294967296) * n);
      };
      const deadline = Date.now() + SECONDS * 1000;
      const client = async () => {
        while (Date.now() < deadline) {
          const b = blobs[rand(blobs.length)]!;
          const want = bytes.get(b.digest)!;
          const kind = rand(4);
          try {
            if (kind === 0) {
              const img = manifest.images[rand(manifest.images.length)];
              const r = await get(`${img.repository}/manifests/${img.tag}`);
              if (r.status !== 200 || sha(r.body) !== img.digest)
                throw new Error(`manifest ${img.tag}: ${r.status}`);
              stats.manifest++;
            } else if (kind === 1) {
              const r = await get(`${b.repo}/blobs/${b.digest}`);
              if (r.status !== 200 || sha(r.body) !== b.digest)
                throw new Error(`full ${b.digest}: ${r.status}, ${r.body.length} bytes`);
              stats.full++;
            } else {
              const start = rand(b.size);
              const end = start + rand(b.size - start);
              const r = await get(`${b.repo}/blobs/${b.digest}`, {
                range: `bytes=${start}-${end}`,
              });
              if (r.status !== 206 || !r.body.equals(want.subarray(start, end + 1)))
                throw new Error(`range ${start}-${end} of ${b.digest}: ${r.status}`);
              stats.range++;
            }
            stats.requests++;
          } catch (err) {
            stats.errors.push((err as Error).message);
          }
        }
      };
      const started = Date.now();
      await Promise.all(Array.from({ length: CLIENTS }, client));
      clearInterval(sampler);
      const secs = (Date.now() - started) / 1000;
      t.same(stats.errors.slice(0, 5), [], `0 errors (${stats.errors.length})`);
      t.ok(
        stats.requests > CLIENTS,
        `${stats.requests} requests in ${secs.toFixed(1)} s (${stats.full} full blobs, ${stats.range} ranges, ${stats.manifest} manifests), every digest and range checked`,
      );
      const third = Math.max(1, Math.floor(rss.length / 3));
      const early = Math.max(...rss.slice(0, third));
      const late = Math.max(...rss.slice(-third));
      const peak = Math.max(...rss);
      t.ok(peak < 400 * 1024 * 1024, `peak RSS ${(peak / 1048576).toFixed(0)} MiB under 400 MiB`);
      t.ok(
        late - early < 64 * 1024 * 1024,
        `RSS flat: ${(early / 1048576).toFixed(0)} MiB early, ${(late / 1048576).toFixed(0)} MiB late`,
      );
      t.comment(
        `load ${name}: clients=${CLIENTS} seconds=${secs.toFixed(1)} requests=${stats.requests} errors=${stats.errors.length} peakRssMiB=${(peak / 1048576).toFixed(0)}`,
      );
    });
  }
});
