// Errors that name what is damaged and what to do (#40): a release or catalog layer that does not
// unpack names the image, the layer and the source, and leaves the cache without it; `bundle
// verify`, `inspect` and `extract` of a damaged, foreign or missing file say so in our words, not
// zstd's ("Unknown frame descriptor", "Restored data doesn't match checksum") or the system's ENOENT.
import t from 'tap';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { startRegistry, sha256 } from '../helpers/registry.mjs';
import { buildLayer, pushImage, releaseFiles, writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-damaged-');
const keys = await keygen(work);
const cache = path.join(work, 'cache');
const blobFile = (digest: string) =>
  path.join(cache, 'blobs', 'sha256', digest.slice('sha256:'.length));

const app = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] },
  `${reg.host}/team/app:v1`,
);
const whole = await buildLayer(
  releaseFiles({ version: '4.14.1', previous: [], images: { app: app.digestRef } }),
);
// pushed as it is: its digest is that of the short bytes, so only unpacking finds the damage
const asLayer = (gz: Buffer) => ({ ...whole, gz, digest: sha256(gz), size: gz.length });

t.test(
  'a release layer that does not unpack: the image, the layer, the source and the fix; the cached copy goes',
  async (t) => {
    const tar = gunzipSync(whole.gz);
    for (const [what, layer, tag] of [
      [
        'gzip cut short',
        asLayer(whole.gz.subarray(0, Math.floor(whole.gz.length / 2))),
        'cut-gzip',
      ],
      // the "Unexpected end of data": whole gzip, the tar inside it cut
      ['tar cut short', asLayer(gzipSync(tar.subarray(0, 700))), 'cut-tar'],
    ] as const) {
      const rel = await pushImage(
        { tag, platforms: [{ os: 'linux', architecture: 'amd64', layers: [layer] }] },
        `${reg.host}/ocp/release:${tag}`,
      );
      const r = await bundle([
        'create',
        '--quiet',
        '--tls-verify=false',
        '--cache',
        cache,
        '--release',
        rel.ref,
        '--dry-run',
      ]);
      t.equal(errorCode(r.stderr), 'INVALID_ARCHIVE', `${what}: ${r.stderr}`);
      t.match(
        r.stderr,
        `the release image ${rel.ref}: layer ${layer.digest} does not unpack`,
        `${what}: names the image and the layer`,
      );
      t.match(
        r.stderr,
        /the source registry served a truncated or corrupt blob, or its copy in the blob cache was damaged \(removed now: a rerun fetches it again\); check the image at its source \(podman pull unpacks every layer\) and run again/,
        `${what}: says what to do`,
      );
      t.notMatch(r.stderr, /bundle: ERROR/, `${what}: a coded error`);
      await t.rejects(
        stat(blobFile(layer.digest)),
        { code: 'ENOENT' },
        `${what}: the cache holds no copy of it`,
      );
    }
  },
);

t.test(
  'bundle verify, inspect, extract: a damaged file, a file of another kind, a missing one',
  async (t) => {
    const layout = path.join(work, 'layout');
    await writeImageLayout(layout, {
      tag: 'v1',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [{ 'app/big': Buffer.alloc(600_000, 7).map((_, i) => (i * 7919) % 251) }],
        },
      ],
    });
    const good = path.join(work, 'good.bundle');
    const made = await bundle([
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--image',
      `oci:${layout}:v1=registry.example.com/app:v1`,
      '--key',
      keys.key,
      '-o',
      good,
      '--cache',
      cache,
    ]);
    t.equal(made.code, 0, made.stderr);
    const bytes = await readFile(good);
    const damaged = path.join(work, 'damaged.bundle');
    const flipped = Buffer.from(bytes);
    for (let i = 0; i < 3; i++) flipped[100 + i] ^= 0x55;
    await writeFile(damaged, flipped);
    // a zstd frame's magic and a header zstd refuses ("Unknown frame descriptor")
    const garbled = path.join(work, 'garbled.bundle');
    await writeFile(garbled, Buffer.concat([bytes.subarray(0, 4), Buffer.alloc(64, 0xff)]));
    const text = path.join(work, 'notes.bundle');
    await writeFile(text, 'not a bundle\n'.repeat(50));
    const missing = path.join(work, 'nowhere.bundle');
    const cases = [
      [
        'damaged',
        damaged,
        'CORRUPT',
        `${damaged} is damaged: its compressed data does not decode (changed in copying, or on the media): copy it again from the original and check the copy against ${damaged}.sha256 (sha256sum -c, in its directory)`,
      ],
      ['garbled', garbled, 'CORRUPT', `${garbled} is damaged: its compressed data does not decode`],
      [
        'text',
        text,
        'CORRUPT',
        `${text} is not a bundle (it does not start with a zstd frame): give the path of a NAME.bundle file`,
      ],
      [
        'missing',
        missing,
        'IO_ERROR',
        `${missing} does not exist: give the path of a NAME.bundle file`,
      ],
    ] as const;
    for (const [what, file, code, line] of cases) {
      for (const args of [
        ['verify', file, '--key', keys.pub, '--quiet'],
        ['inspect', file],
        ['extract', file, path.join(work, `x-${what}`), '--key', keys.pub, '--quiet'],
      ]) {
        const r = await bundle(args);
        const cmd = `${args[0]} ${what}`;
        t.equal(r.code, 1, cmd);
        t.equal(r.stderr.trim().split('\n').length, 1, `${cmd}: one line`);
        // inspect reads only the head: the damage at byte 100 lies in bundle.json's frame
        t.equal(errorCode(r.stderr), code, `${cmd}: ${r.stderr}`);
        t.match(r.stderr, line, `${cmd}: names the file and what to do`);
        t.notMatch(
          r.stderr,
          /Unknown frame descriptor|doesn't match checksum|ENOENT|stat '/i,
          `${cmd}: no zstd or system words`,
        );
      }
    }
  },
);
