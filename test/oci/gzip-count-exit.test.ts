// The gzip counting thread (issue #45) holds the process open only while an answer from it is
// awaited: a layer whose download failed for good, or a counter left unfinished, must not keep a
// `bundle create` that already printed its error from exiting.
import t from 'tap';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { tmpdir } from '../helpers/tmp.mjs';

// literal paths: scripts/unused-exports.mjs counts the names this test's script uses through them
const dist = (file: string) =>
  pathToFileURL(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..', file)).href;
const oci = dist('packages/oci/dist/index.js');
const imageFetch = dist('packages/image-fetch/dist/index.js');

const SCRIPT = `
import { randomBytes, createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { OciError } from '${oci}';
import { BlobCache, UnpackedCounter } from '${imageFetch}';
const gz = gzipSync(randomBytes(2_000_000), { level: 0 });
const left = new UnpackedCounter(gz.length);
await left.push(gz.subarray(0, 500_000));
const cache = new BlobCache(process.argv[2]);
const digest = 'sha256:' + createHash('sha256').update(gz).digest('hex');
// half the layer, then a refusal that is not retried
const src = () => Readable.from((async function* () { yield gz.subarray(0, 1_000_000); throw new OciError('UNAUTHORIZED', 'refused'); })());
const err = await cache.fetch(digest, gz.length, async () => src(), { measure: true }).catch((e) => e);
console.log(err.code);
`;

t.test(
  'a failed measured download and an unfinished counter leave the process free to exit',
  async (t) => {
    const dir = await tmpdir(t, 'ob-gzip-exit-');
    const script = path.join(dir, 'measure.mjs');
    await writeFile(script, SCRIPT);
    const child = spawn(process.execPath, [script, path.join(dir, 'cache')], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const started = Date.now();
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
      child.once('exit', (c, s) => resolve([c, s])),
    );
    clearTimeout(timer);
    t.equal(out.trim(), 'UNAUTHORIZED', `the fetch failed as its source did ${err}`);
    t.equal(signal, null, `exited by itself, not killed after 20 s (${Date.now() - started} ms)`);
    t.equal(code, 0);
  },
);
