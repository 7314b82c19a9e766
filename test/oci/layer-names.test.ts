// Entry names are untrusted and tar-stream takes PAX/GNU long names of up to 4 MiB: a layer of
// long whiteout names must not pile up in memory, and no error line may quote a name whole.
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { assertDigest } from '@offline-bundle/oci';
import { readLayerFiles } from '@offline-bundle/openshift-release';
import { bundleImages } from '../../builder/dist/image-set/catalog.js';
import { ROOT, run } from '../builder/lib.js';
import { tmpdir } from '../helpers/tmp.mjs';

async function layer(entries: [string, string][]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(Buffer.from(c as Uint8Array));
  })();
  for (const [name, content] of entries) {
    await new Promise<void>((resolve, reject) =>
      pack.entry({ name, mode: 0o644, mtime: new Date(0) }, content, (err) =>
        err ? reject(err) : resolve(),
      ),
    );
  }
  pack.finalize();
  await done;
  return gzipSync(Buffer.concat(chunks));
}
const open = (bufs: Buffer[]) => bufs.map((b) => async () => Readable.from([b]));

t.test(
  'whiteouts still hide what earlier layers hold; names past PATH_MAX are streamed past',
  async (t) => {
    const long = `configs/${'d'.repeat(5000)}/catalog.json`;
    const layers = [
      await layer([
        ['configs/a/catalog.json', 'a'],
        ['configs/b/x.json', 'b'],
        ['configs/c.json', 'c'],
        [long, 'l'],
      ]),
      await layer([
        ['configs/.wh.b', ''],
        ['configs/a/.wh..wh..opq', ''],
        [`configs/.wh.${'e'.repeat(5000)}`, ''],
        ['configs/a/new.json', 'n'],
      ]),
    ];
    const found = await readLayerFiles(
      open(layers),
      (n) => n.startsWith('configs/') && !n.includes('.wh.'),
      'cat:1',
    );
    t.same([...found.keys()].sort(), ['configs/a/new.json', 'configs/c.json']);
  },
);

t.test(
  '40 whiteouts of 4 MiB names in a 164 KiB layer: read in a 128 MB heap, none kept',
  async (t) => {
    const work = await tmpdir(t, 'ob-layer-names-');
    const file = path.join(work, 'layer.tar.gz');
    await writeFile(
      file,
      await layer(
        Array.from({ length: 40 }, (_, i): [string, string] => [
          `configs/.wh.${String(i).padStart(2, '0')}${'x'.repeat(4 * 1024 * 1024 - 64)}`,
          '',
        ]),
      ),
    );
    const script = `import { createReadStream } from 'node:fs';
    import { readLayerFiles } from '@offline-bundle/openshift-release';
    const found = await readLayerFiles([async () => createReadStream(${JSON.stringify(file)})], (n) => n.startsWith('configs/'), 'cat:1');
    console.log(found.size, Math.round(process.memoryUsage().heapUsed / 2 ** 20));`;
    // each name is parsed (4 MiB) and dropped; kept, 40 of them need 160 MiB
    const r = await run(
      process.execPath,
      ['--max-old-space-size=128', '--input-type=module', '-e', script],
      { cwd: ROOT },
    );
    t.equal(r.code, 0, r.stderr.slice(0, 300));
    t.equal(r.stdout.split(' ')[0], '0');
  },
);

t.test('a 3 MB name is quoted cut, in an error line under 1 KB, once', async (t) => {
  const name = 'x'.repeat(3_000_000);
  const thrown = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return (e as Error).message;
    }
    return '';
  };
  const digest = thrown(() => assertDigest(name, 'the layer digest'));
  t.ok(digest.length > 0 && digest.length < 1024, `${digest.length} characters`);
  t.match(digest, /^the layer digest "x+…" \(3000000 characters\) is not a sha256 digest/);
  const image = `quay.io/${'a'.repeat(3_000_000)}:1`;
  const bundle = {
    name: 'b.v1',
    package: 'p',
    image,
    version: '1.0.0',
    relatedImages: [],
  } as unknown as Parameters<typeof bundleImages>[0][number];
  const message = thrown(() => bundleImages([bundle]));
  t.ok(message.length > 0 && message.length < 1024, `${message.length} characters`);
  t.equal(message.split('(3000010 characters)').length, 2, 'the reference quoted once');
});
