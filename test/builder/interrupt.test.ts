// Ctrl-C (or SIGTERM, or SIGHUP) during `bundle create`: the output is never written or half-written, no temp file
// stays beside it, and a rerun finishes from the cache.
import t from 'tap';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { BUNDLE, keygen, run } from '../agent/fixtures.js';

t.test('SIGINT, SIGTERM and SIGHUP while writing the bundle', async (t) => {
  const dir = await tmpdir(t, 'ob-interrupt-');
  const keys = await keygen(dir);
  const layout = join(dir, 'src');
  await writeImageLayout(layout, {
    tag: 'big',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ a: randomBytes(96 << 20) }, { b: randomBytes(96 << 20) }],
      },
    ],
  });
  const outDir = join(dir, 'out');
  const args = [
    'create',
    '--version',
    '1.0',
    '--image',
    `oci:${layout}:big=quay.io/acme/big:v1`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    join(outDir, 'x.bundle'),
  ];
  /** Runs `bundle create` and sends `signal` once the write has begun. */
  const interrupt = async (signal: NodeJS.Signals) => {
    const child = spawn(process.execPath, [BUNDLE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let sent = false;
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
      if (!sent && /writing /.test(stderr)) {
        sent = true;
        child.kill(signal);
      }
    });
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    return { code, stderr, sent };
  };
  const { code, stderr, sent } = await interrupt('SIGINT');
  t.ok(sent, 'interrupted during the write');
  t.equal(code, 130, 'exits 130 (128 + SIGINT), as a shell reports an interrupted command');
  t.match(stderr, /bundle: INTERRUPTED: interrupted: nothing written/);
  t.same(await readdir(outDir).catch(() => []), [], 'no bundle, no temp file, no .sha256');

  const term = await interrupt('SIGTERM');
  t.ok(term.sent, 'SIGTERM during the write (the blobs are in the cache now)');
  t.equal(term.code, 143, 'exits 143 (128 + SIGTERM)');
  t.same(await readdir(outDir).catch(() => []), [], 'nothing left behind either');

  // ssh going away: SIGHUP stops the run as SIGTERM does
  const hup = await interrupt('SIGHUP');
  t.ok(hup.sent, 'hung up during the write');
  t.equal(hup.code, 129, 'exits 129 (128 + SIGHUP)');
  t.match(hup.stderr, /bundle: INTERRUPTED: interrupted: nothing written/);
  t.same(await readdir(outDir).catch(() => []), [], 'no bundle, no temp file, no .sha256');

  const again = await run(BUNDLE, [...args, '--quiet']);
  t.equal(again.code, 0, `a rerun completes (${again.stderr})`);
  t.same((await readdir(outDir)).sort(), ['x.bundle', 'x.bundle.sha256']);
});
