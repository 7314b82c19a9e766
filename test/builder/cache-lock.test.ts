// `bundle cache prune` while a `bundle create` uses the same cache refuses (BUSY, one line)
// instead of deleting what the build downloads; a lock left by a killed run does not block it;
// a download that restarts from zero does not count its bytes twice.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { OciError, sha256 } from '@offline-bundle/oci';
import { BlobCache } from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { BUNDLE_BIN, bundle, errorCode, hermeticEnv, keygen, listDir } from './lib.js';

const work = await tmpdir(t, 'ob-cache-lock-');

t.test('prune while a create holds the cache: BUSY; after it: pruned', async (t) => {
  const keys = await keygen(work);
  const layout = path.join(work, 'layout');
  const img = await writeImageLayout(layout, {
    tag: 'v1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ big: randomBytes(1 << 20) }] }],
  });
  const layer = img.manifests[0]!.layers[0]!;
  let seen!: () => void;
  const downloading = new Promise<void>((r) => {
    seen = r;
  });
  const server = createServer((req, res) => {
    const url = req.url ?? '';
    if (url === '/v2/') return void res.writeHead(200).end('{}');
    if (url.endsWith('/manifests/v1'))
      return void res.writeHead(200, { 'content-type': img.mediaType }).end(img.raw);
    const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(url);
    if (!m) return void res.writeHead(404).end();
    void readFile(path.join(layout, 'blobs', 'sha256', m[1]!.slice(7))).then((b) => {
      if (m[1] !== layer) return void res.writeHead(200).end(b);
      // the layer's first bytes, then a stall: the create is mid-download
      res.writeHead(200, { 'content-length': String(b.length) });
      res.write(b.subarray(0, 65536));
      seen();
    });
  });
  server.on('clientError', (_e, socket) => socket.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const cache = path.join(work, 'cache');
  const child = spawn(
    process.execPath,
    [
      BUNDLE_BIN,
      'create',
      '--version',
      '1.0',
      '--image',
      `docker://127.0.0.1:${(server.address() as AddressInfo).port}/acme/app:v1`,
      '--tls-verify=false',
      '--key',
      keys.key,
      '--cache',
      cache,
      '-o',
      path.join(work, 'x.bundle'),
    ],
    { env: hermeticEnv(), stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise<number | null>((r) => child.once('close', (c) => r(c)));
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  await downloading;
  const busy = await bundle(['cache', 'prune', '--cache', cache]);
  t.equal(busy.code, 1);
  t.equal(errorCode(busy.stderr), 'BUSY', busy.stderr);
  t.match(
    busy.stderr,
    new RegExp(
      `^bundle: BUSY: the blob cache ${cache} is in use by bundle create \\(pid ${child.pid}\\): prune it once that run ends`,
    ),
  );
  t.equal(busy.stderr.trimEnd().split('\n').length, 1, 'one line');
  t.ok(
    (await listDir(path.join(cache, 'blobs', 'sha256'))).some((f) => f.endsWith('.partial')),
    'the download in progress is untouched',
  );
  child.kill('SIGINT');
  t.equal(await exited, 130);
  const after = await bundle(['cache', 'prune', '--cache', cache, '--json']);
  t.equal(after.code, 0, after.stderr);
  t.ok(
    (JSON.parse(after.stdout) as { removed: number }).removed > 0,
    'pruned once the create ended',
  );
});

t.test('a lock left by a killed create does not block prune', async (t) => {
  const cache = path.join(work, 'cache-stale');
  await mkdir(path.join(cache, 'locks'), { recursive: true });
  const dead = spawnSync('true').pid!;
  await writeFile(path.join(cache, 'locks', `create.${dead}`), `${dead}\n`);
  const r = await bundle(['cache', 'prune', '--cache', cache]);
  t.equal(r.code, 0, r.stderr);
  t.same(await listDir(path.join(cache, 'locks')), [], 'the stale lock is gone');
});

t.test('a download that restarts from zero counts each byte once', async (t) => {
  const dir = path.join(work, 'cache-restart');
  const bytes = randomBytes(256 * 1024);
  const digest = sha256(bytes);
  const cache = new BlobCache(dir);
  let counted = 0;
  let attempts = 0;
  const partial = path.join(dir, 'blobs', 'sha256', `${digest.slice(7)}.partial`);
  await cache.fetch(
    digest,
    bytes.length,
    async (offset) => {
      attempts++;
      if (attempts === 1) {
        // half arrives, the link drops, and the .partial goes (as a prune took it) before the retry
        return Readable.from(
          (async function* () {
            yield bytes.subarray(0, 128 * 1024);
            await new Promise((r) => setTimeout(r, 50));
            await rm(partial, { force: true });
            throw new OciError('NETWORK_ERROR', 'connection reset');
          })(),
        );
      }
      return Readable.from([bytes.subarray(offset)]);
    },
    {
      onBytes: (n) => {
        counted += n;
      },
    },
  );
  t.equal(attempts, 2);
  t.equal(counted, bytes.length, "progress ends at the blob's size, not past it");
});
