// A zstd layer bomb in an operator catalog image (#44 item 6): a layer of some 100 KiB holding
// the catalog files and, beside them, gigabytes of zeros. The files kept were bounded; the
// decompression was not (zstd-napi's DecompressStream expands a whole 64 KiB input chunk, 2 GiB
// here, before anything reads it). `bundle create --dry-run` runs in a child whose peak RSS is
// measured: a layer under MAX_LAYER_UNPACKED_BYTES is read correctly, one over it is refused in
// one line naming the image and the limit; both in bounded memory.
import t from 'tap';
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { MAX_LAYER_UNPACKED_BYTES } from '@offline-bundle/openshift-release';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode } from './lib.js';

const GiB = 1024 * 1024 * 1024;
/** Peak RSS `bundle create --dry-run` stays under while it reads the layer (node and the CLI take some 150 MB). */
const RSS_LIMIT = 512 * 1024 * 1024;
const BLOCK = 128 * 1024;

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-catalog-bomb-');

/** A zstd frame header: no content size, a 128 KiB window. */
const frameHeader = () => Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3]);
const blockHeader = (size: number, type: number, last: boolean) => {
  const b = Buffer.alloc(3);
  b.writeUIntLE((size << 3) | (type << 1) | (last ? 1 : 0), 0, 3);
  return b;
};
/** `bytes` as one zstd frame of raw (stored) blocks. */
function zstdStored(bytes: Buffer): Buffer {
  const parts: Buffer[] = [frameHeader()];
  for (let at = 0; at < bytes.length; at += BLOCK) {
    const piece = bytes.subarray(at, at + BLOCK);
    parts.push(blockHeader(piece.length, 0, at + BLOCK >= bytes.length), piece);
  }
  return Buffer.concat(parts);
}
/** `size` zeros as one zstd frame of RLE blocks: 4 bytes for each 128 KiB. */
function zstdZeros(size: number): Buffer {
  const blocks = Math.ceil(size / BLOCK);
  const parts: Buffer[] = [frameHeader()];
  for (let i = 0; i < blocks; i++)
    parts.push(
      blockHeader(Math.min(BLOCK, size - i * BLOCK), 1, i === blocks - 1),
      Buffer.from([0]),
    );
  return Buffer.concat(parts);
}
/** One ustar header of a regular file. */
function tarHeader(name: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  const field = (at: number, len: number, v: string) => h.write(v, at, len, 'latin1');
  const octal = (at: number, len: number, v: number) =>
    field(at, len, `${v.toString(8).padStart(len - 1, '0')}\0`);
  field(0, 100, name);
  octal(100, 8, 0o644);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, size);
  octal(136, 12, 0);
  field(148, 8, '        ');
  field(156, 1, '0');
  field(257, 8, 'ustar\x0000');
  let sum = 0;
  for (const b of h) sum += b;
  field(148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}
const padded = (b: Buffer) => Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);

const bundleImage = await pushImage(
  {
    tag: 'v1.0.0',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ 'manifests/csv.yaml': 'bomb-operator v1.0.0' }],
      },
    ],
  },
  `${reg.host}/operators/bomb-bundle:v1.0.0`,
);
const CATALOG = [
  { schema: 'olm.package', name: 'bomb-operator', defaultChannel: 'stable' },
  {
    schema: 'olm.channel',
    package: 'bomb-operator',
    name: 'stable',
    entries: [{ name: 'bomb.v1.0.0' }],
  },
  {
    schema: 'olm.bundle',
    name: 'bomb.v1.0.0',
    package: 'bomb-operator',
    image: bundleImage.digestRef,
    properties: [
      { type: 'olm.package', value: { packageName: 'bomb-operator', version: '1.0.0' } },
    ],
  },
]
  .map((o) => JSON.stringify(o))
  .join('\n');

/** A catalog image of one zstd layer: the catalog's file, then `zeros` bytes of zeros in a file beside it. */
async function bombCatalog(tag: string, zeros: number) {
  const file = Buffer.from(CATALOG);
  const prefix = Buffer.concat([
    tarHeader('configs/bomb-operator/catalog.json', file.length),
    padded(file),
    tarHeader('configs/bomb-operator/zeros.bin', zeros),
  ]);
  // the zeros and the archive's two zero end blocks
  const layer = Buffer.concat([zstdStored(prefix), zstdZeros(zeros + 1024)]);
  const digest = `sha256:${createHash('sha256').update(layer).digest('hex')}`;
  // diff_ids are not read when a catalog is: the tar is never hashed (it is gigabytes)
  const built = {
    gz: layer,
    digest,
    size: layer.length,
    diffID: digest,
    mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd',
  };
  const img = await pushImage(
    {
      tag,
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          config: { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
          layers: [built],
        },
      ],
    },
    `${reg.host}/redhat/bomb-index:${tag}`,
  );
  return { ...img, layerBytes: layer.length };
}

/** `bundle create --dry-run` of the catalog's package, with the CLI's peak RSS. */
async function dryRun(name: string, catalog: string) {
  const dir = path.join(work, name);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(
    file,
    stringify({
      apiVersion: 'offline-bundle/v1alpha1',
      kind: 'Bundle',
      version: '1.0',
      operators: [{ catalog, packages: [{ name: 'bomb-operator' }] }],
    }),
  );
  const rss = path.join(dir, 'rss.mjs');
  await writeFile(
    rss,
    "process.on('exit', () => process.stderr.write(`peak-rss ${process.resourceUsage().maxRSS * 1024}\\n`));\n",
  );
  const started = Date.now();
  const r = await bundle(
    [
      'create',
      '--dry-run',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      path.join(dir, 'cache'),
      '-f',
      file,
    ],
    { env: { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${rss}`.trim() } },
  );
  const peak = Number(/peak-rss (\d+)/.exec(r.stderr)?.[1]);
  return { ...r, peak, ms: Date.now() - started, stderr: r.stderr.replace(/^peak-rss \d+\n/m, '') };
}

t.test(
  'a catalog layer with 1 GiB of zeros beside its files: read correctly, in bounded memory',
  async (t) => {
    const c = await bombCatalog('one-gib', GiB);
    t.ok(c.layerBytes < 64 * 1024, `the layer is ${c.layerBytes} bytes`);
    const r = await dryRun('one-gib', c.ref);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, bundleImage.digestRef.split('@')[1]!, 'the selected bundle image is listed');
    t.ok(
      r.peak > 0 && r.peak < RSS_LIMIT,
      `peak RSS ${(r.peak / 2 ** 20).toFixed(0)} MiB (under ${RSS_LIMIT / 2 ** 20} MiB), ${r.ms} ms`,
    );
  },
);

t.test(
  `a catalog layer that unpacks past MAX_LAYER_UNPACKED_BYTES (${MAX_LAYER_UNPACKED_BYTES / GiB} GiB): one line naming the image and the limit, in bounded memory`,
  async (t) => {
    const c = await bombCatalog('over', MAX_LAYER_UNPACKED_BYTES + GiB / 2);
    t.ok(c.layerBytes < 256 * 1024, `the layer is ${c.layerBytes} bytes`);
    const r = await dryRun('over', c.ref);
    t.equal(r.code, 1, r.stderr);
    t.equal(errorCode(r.stderr), 'FILE_TOO_LARGE', r.stderr);
    t.match(
      r.stderr,
      new RegExp(
        `bomb-index:over: layer sha256:[0-9a-f]{64} unpacks to more than ${MAX_LAYER_UNPACKED_BYTES / GiB} GiB, the most read from one layer \\(MAX_LAYER_UNPACKED_BYTES\\)`,
      ),
    );
    t.equal(r.stderr.trimEnd().split('\n').length, 1, 'one line');
    t.ok(
      r.peak > 0 && r.peak < RSS_LIMIT,
      `peak RSS ${(r.peak / 2 ** 20).toFixed(0)} MiB (under ${RSS_LIMIT / 2 ** 20} MiB), ${r.ms} ms`,
    );
  },
);
