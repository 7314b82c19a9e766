// A full cache disk (a real 256 KB tmpfs): the blob cache behind `bundle create` fails with one
// NO_SPACE line that names the cache directory and the ways out, does not retry, and leaves no
// `.partial` behind. (The CLI's preflight refuses a cache disk that is too small before any
// download, see write-once.test.ts; this is the disk filling up under a running download.)
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import path from 'node:path';
import { OciError, sha256 } from '@offline-bundle/oci';
import { BlobCache } from '@offline-bundle/image-fetch';
import { tmpdir } from '../helpers/tmp.mjs';
import { smallFs } from '../agent/fixtures.js';
import { listDir } from './lib.js';

t.test('ENOSPC while a blob downloads: NO_SPACE, one line, no .partial, one attempt', async (t) => {
  const dir = path.join(await tmpdir(t, 'ob-cache-full-'), 'cache');
  if (!smallFs(dir, 256, t)) return t.skip('cannot mount a tmpfs here');
  const bytes = randomBytes(1024 * 1024);
  let opened = 0;
  const cache = new BlobCache(dir);
  const err = await cache
    .fetch(sha256(bytes), bytes.length, async () => {
      opened++;
      return Readable.from([bytes.subarray(0, 512 * 1024), bytes.subarray(512 * 1024)]);
    })
    .catch((e: unknown) => e);
  t.ok(err instanceof OciError, String(err));
  t.equal((err as OciError).code, 'NO_SPACE');
  const message = (err as Error).message;
  t.notMatch(message, /\n/, 'one line');
  t.match(
    message,
    new RegExp(
      `no space left for the blob cache ${dir}: free space there \\("bundle cache prune --cache ${dir}" empties it\\) or pass --cache DIR`,
    ),
  );
  t.notMatch(message, /ENOSPC: ENOSPC/, 'no doubled errno text');
  t.equal(opened, 1, 'a full disk is not retried');
  t.same(
    (await listDir(path.join(dir, 'blobs', 'sha256'))).filter((f) => f.endsWith('.partial')),
    [],
    'no .partial left',
  );
});

t.test('ENOSPC while a manifest is stored: NO_SPACE too', async (t) => {
  const dir = path.join(await tmpdir(t, 'ob-cache-full-'), 'cache');
  if (!smallFs(dir, 64, t)) return t.skip('cannot mount a tmpfs here');
  const bytes = randomBytes(256 * 1024);
  const err = await new BlobCache(dir).putBytes(sha256(bytes), bytes).catch((e: unknown) => e);
  t.equal((err as OciError).code, 'NO_SPACE', String(err));
  t.same(await listDir(path.join(dir, 'blobs', 'sha256')), [], 'no temp file left');
});
