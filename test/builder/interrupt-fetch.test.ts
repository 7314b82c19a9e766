// Ctrl-C (SIGINT/SIGTERM) stops `bundle create` at once in the phases before the write too:
// while an image is resolved against a registry that never answers (no retries after it), and
// while a blob download is in flight (the request is aborted, nothing is written beside -o).
import t from 'tap';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { BUNDLE_BIN, hermeticEnv, keygen, listDir } from './lib.js';

const work = await tmpdir(t, 'ob-interrupt-fetch-');
const keys = await keygen(work);

/** A registry on 127.0.0.1 whose answers `handle` decides; `seen` resolves at the first request `when` matches. */
async function registry(
  t: { teardown: (fn: () => unknown) => void },
  handle: (req: IncomingMessage, res: ServerResponse) => void,
) {
  const server = createServer(handle);
  server.on('clientError', (_e, socket) => socket.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/**
 * A registry serving `img` (tag v1) from its layout, except blob `stalled`: its first 64 KiB,
 * then nothing (a slow link); `onStall` is told once those bytes are sent.
 */
function stallingRegistry(
  t: { teardown: (fn: () => unknown) => void },
  layout: string,
  img: { mediaType: string; raw: Buffer },
  stalled: string,
  onStall: (req: IncomingMessage) => void,
) {
  return registry(t, (req, res) => {
    const url = req.url ?? '';
    if (url === '/v2/') return void res.writeHead(200).end('{}');
    if (url.endsWith('/manifests/v1'))
      return void res.writeHead(200, { 'content-type': img.mediaType }).end(img.raw);
    const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(url);
    if (!m) return void res.writeHead(404).end();
    const file = path.join(layout, 'blobs', 'sha256', m[1]!.slice(7));
    if (m[1] !== stalled) return void readFile(file).then((b) => res.writeHead(200).end(b));
    void readFile(file).then((b) => {
      res.writeHead(200, { 'content-length': String(b.length) });
      res.write(b.subarray(0, 65536));
      onStall(req);
    });
  });
}

/** Runs `bundle create` and sends `signal` when stderr or `trigger` says so; the time from the signal to the exit. */
function interrupt(args: string[], signal: NodeJS.Signals, trigger: Promise<void>) {
  const child = spawn(process.execPath, [BUNDLE_BIN, ...args], {
    env: hermeticEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  let sentAt = 0;
  void trigger.then(() =>
    setTimeout(() => {
      sentAt = Date.now();
      child.kill(signal);
    }, 300),
  );
  // one that ignores the signal, or stops only at its own request timeout (60 s for headers),
  // is killed here and fails the exit code check: a bound against a hang, not a time asserted
  const guard = setTimeout(() => child.kill('SIGKILL'), 30_000);
  child.once('close', () => clearTimeout(guard));
  return new Promise<{ code: number | null; stderr: string; ms: number }>((r) =>
    child.once('close', (code) => r({ code, stderr, ms: sentAt ? Date.now() - sentAt : -1 })),
  );
}

t.test('while resolving against a registry that never answers', async (t) => {
  let seen = () => {};
  const host = await registry(t, () => {
    seen(); /* never answers */
  });
  for (const [signal, exit] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    const out = path.join(work, `hang-${signal}`, 'x.bundle');
    const first = new Promise<void>((r) => {
      seen = r;
    });
    const r = await interrupt(
      [
        'create',
        '--version',
        '1.0',
        '--image',
        `docker://${host}/acme/app:v1`,
        '--tls-verify=false',
        '--key',
        keys.key,
        '--cache',
        path.join(work, 'cache-hang'),
        '-o',
        out,
      ],
      signal,
      first,
    );
    t.equal(r.code, exit, `${signal}: exit ${exit}, ${r.ms} ms after the signal (${r.stderr})`);
    t.match(r.stderr, /bundle: INTERRUPTED: interrupted: nothing written/);
    t.notMatch(r.stderr, /retrying/, 'no retry after the signal');
    t.same(await listDir(path.dirname(out)), [], 'nothing beside -o');
  }
});

t.test('while a blob download is in flight', async (t) => {
  const layout = path.join(work, 'layout');
  const img = await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ big: randomBytes(4 << 20) }] }],
  });
  const layer = img.manifests[0]!.layers[0]!;
  let seen!: () => void;
  const started = new Promise<void>((r) => {
    seen = r;
  });
  let layerRequests = 0;
  const host = await stallingRegistry(t, layout, img, layer, () => {
    layerRequests++;
    seen();
  });
  const out = path.join(work, 'dl', 'x.bundle');
  const cache = path.join(work, 'cache-dl');
  const r = await interrupt(
    [
      'create',
      '--version',
      '1.0',
      '--image',
      `docker://${host}/acme/app:v1`,
      '--tls-verify=false',
      '--key',
      keys.key,
      '--cache',
      cache,
      '-o',
      out,
    ],
    'SIGINT',
    started,
  );
  t.equal(r.code, 130, `exit 130, ${r.ms} ms after the signal (${r.stderr})`);
  t.match(
    r.stderr,
    /bundle: INTERRUPTED: interrupted: nothing written; a rerun resumes from the cache/,
  );
  t.equal(layerRequests, 1, 'the download was not retried');
  t.same(await listDir(path.dirname(out)), [], 'nothing beside -o');
  const partial = (await listDir(path.join(cache, 'blobs', 'sha256'))).filter((f) =>
    f.endsWith('.partial'),
  );
  t.same(partial, [`${layer.slice(7)}.partial`], 'what arrived stays in the cache for the rerun');
});

// The one-pass writer fails while later blobs are still downloading: those downloads feed
// nothing now and must stop at once, not run to their end (minutes on a slow link) before the
// error shows. Made deterministic here: the cache holds a same-sized corrupt copy of the layer
// packed first, so the write fails on its digest, while the other layer's download stalls.
t.test('a failed write stops the downloads still in flight', async (t) => {
  const layout = path.join(work, 'layout-wf');
  const img = await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ a: randomBytes(1 << 20) }, { b: randomBytes(1 << 20) }],
      },
    ],
  });
  const [first, stalled] = [...img.manifests[0]!.layers].sort();
  const cache = path.join(work, 'cache-wf');
  await mkdir(path.join(cache, 'blobs', 'sha256'), { recursive: true });
  const good = await readFile(path.join(layout, 'blobs', 'sha256', first!.slice(7)));
  await writeFile(path.join(cache, 'blobs', 'sha256', first!.slice(7)), randomBytes(good.length));
  let seen!: () => void;
  const started = new Promise<void>((r) => {
    seen = r;
  });
  let dropped!: () => void;
  const aborted = new Promise<void>((r) => {
    dropped = r;
  });
  const host = await stallingRegistry(t, layout, img, stalled!, (req) => {
    req.socket.once('close', () => dropped());
    seen();
  });
  const out = path.join(work, 'wf', 'x.bundle');
  // no signal is sent: the trigger never fires
  const r = await interrupt(
    [
      'create',
      '--version',
      '1.0',
      '--image',
      `docker://${host}/acme/app:v1`,
      '--tls-verify=false',
      '--key',
      keys.key,
      '--cache',
      cache,
      '-o',
      out,
    ],
    'SIGINT',
    new Promise<void>(() => {}),
  );
  await started;
  t.equal(r.code, 1, `exits with the write's error (${r.stderr})`);
  t.match(r.stderr, /BLOB_DIGEST_MISMATCH/, "the error is the write's, not the stopped download's");
  t.notMatch(r.stderr, /writing /, 'no writing phase begins after the failure');
  await aborted;
  t.pass('the stalled download was dropped');
  t.same(await listDir(path.dirname(out)), [], 'nothing beside -o');
});
