// tier: unit
// The readers hold every tar header to canonicalHeader's bytes: it must be exactly what the
// writer's packer (tar-stream, fed writer.ts's fixed metadata) writes, at every size,
// including the GNU base-256 sizes from 8 GiB on, which no test bundle is big enough to reach.
import t from 'tap';
import tar from 'tar-stream';
import { canonicalHeader } from '@offline-bundle/format';

/** The header block tar-stream packs for an entry of `size` bytes, as writer.ts describes it. */
function packedHeader(name: string, size: number): Promise<Buffer> {
  const pack = tar.pack();
  return new Promise<Buffer>((resolve) => {
    pack.once('data', (c) => resolve(Buffer.from(c as Buffer).subarray(0, 512)));
    pack.entry({
      name,
      size,
      mode: 0o644,
      mtime: new Date(0),
      uid: 0,
      gid: 0,
      uname: '',
      gname: '',
      type: 'file',
    });
  }).finally(() => pack.destroy());
}

t.test("canonicalHeader is the packer's header, byte for byte", async (t) => {
  const names = [
    'bundle.json',
    'bundle.json.sig',
    'oci-layout',
    'index.json',
    `blobs/sha256/${'0123456789abcdef'.repeat(4)}`,
  ];
  const sizes = [
    0,
    1,
    511,
    512,
    4 * 1024 * 1024,
    8 * 1024 ** 3 - 1,
    8 * 1024 ** 3,
    9 * 1024 ** 3 + 5,
    2 ** 40 + 3,
  ];
  for (const name of names) {
    for (const size of sizes) {
      const want = await packedHeader(name, size);
      t.ok(canonicalHeader(name, size)?.equals(want), `${name}, ${size} bytes`);
    }
  }
});

t.test('no canonical header for names the format never writes', async (t) => {
  t.equal(canonicalHeader('', 1), undefined, 'empty');
  t.equal(canonicalHeader('x'.repeat(101), 1), undefined, 'over 100 bytes (would need a prefix)');
  t.equal(canonicalHeader('blobs/sha256/é', 1), undefined, 'not ASCII');
  t.equal(canonicalHeader('a b', 1), undefined, 'a space');
  t.equal(canonicalHeader('x', -1), undefined, 'a negative size');
});
