// tier: unit
// readLayerFiles: the files an image's layers hold, as its filesystem shows them (later layers
// override, whiteouts hide) and bounded (each file, and all files read from one image together).
import t from 'tap';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import {
  MAX_LAYER_FILE_BYTES,
  MAX_LAYER_TOTAL_BYTES,
  readLayerFiles,
} from '@offline-bundle/openshift-release';

async function layer(entries: Record<string, string | Buffer>): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(Buffer.from(c as Uint8Array));
  })();
  for (const [name, content] of Object.entries(entries)) {
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
const text = (m: Map<string, Buffer>) =>
  Object.fromEntries([...m].map(([k, v]) => [k, v.toString()]).sort());

t.test('whiteouts of a later layer hide files of earlier ones, not its own', async (t) => {
  const layers = [
    await layer({
      'configs/a/catalog.json': 'a1',
      'configs/b/catalog.json': 'b1',
      'configs/c/x.yaml': 'c1',
      'configs/c/y.yaml': 'c2',
      'configs/top.json': 't1',
    }),
    await layer({
      'configs/a/.wh.catalog.json': '',
      'configs/.wh.b': '',
      'configs/c/.wh..wh..opq': '',
      'configs/c/z.yaml': 'c3',
    }),
    await layer({ 'configs/b/catalog.json': 'b2' }),
  ];
  const found = await readLayerFiles(
    open(layers),
    (n) => n.startsWith('configs/') && !n.includes('.wh.'),
    'cat:1',
  );
  t.same(text(found), {
    'configs/b/catalog.json': 'b2',
    'configs/c/z.yaml': 'c3',
    'configs/top.json': 't1',
  });
});

t.test(
  'all files read from one image together are bounded, the error names the image and the bound',
  async (t) => {
    t.equal(MAX_LAYER_TOTAL_BYTES, 64 * 1024 * 1024);
    const big = Buffer.alloc(MAX_LAYER_FILE_BYTES - 1024, 0x20);
    // each file is under the per-file bound; five together are over the total
    const layers = [
      await layer({ 'configs/1.json': big, 'configs/2.json': big }),
      await layer({ 'configs/3.json': big, 'configs/4.json': big, 'configs/5.json': big }),
    ];
    await t.rejects(
      readLayerFiles(open(layers), (n) => n.startsWith('configs/'), 'quay.io/x/cat:1'),
      {
        code: 'FILE_TOO_LARGE',
        message:
          /quay\.io\/x\/cat:1: the files read from its layers exceed 64 MiB together \(at "configs\/5\.json"\)/,
      },
    );
    const four = await readLayerFiles(
      open(layers.slice(0, 1)),
      (n) => n.startsWith('configs/'),
      'quay.io/x/cat:1',
    );
    t.equal(four.size, 2, 'under the bound all are read');
  },
);
