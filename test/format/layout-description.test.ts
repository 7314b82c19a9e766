// readLayoutDescription: a layout's bundle.json and signature (bundle-agent serve DIR, restore
// from a kept layout, reuse of a staged one) are read within the format's limits, and a FIFO or
// device in their place is refused at once instead of hanging or filling memory.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readLayoutDescription } from '@offline-bundle/format';
import { tmpdir } from '../helpers/tmp.mjs';

const work = await tmpdir(t, 'ob-layout-desc-');
const layout = async (
  name: string,
  json: (p: string) => Promise<void>,
  sig: (p: string) => Promise<void>,
) => {
  const d = join(work, name);
  await mkdir(d);
  await json(join(d, 'bundle.json'));
  await sig(join(d, 'bundle.json.sig'));
  return d;
};
const text = (s: string | Buffer) => (p: string) => writeFile(p, s);

t.test('the files as written: read', async (t) => {
  const d = await layout('ok', text('{"a":1}'), text('sig'));
  const r = await readLayoutDescription(d);
  t.equal(r.manifestBytes.toString(), '{"a":1}');
  t.equal(r.signature.toString(), 'sig');
});

t.test('a FIFO, /dev/zero, or a file over the limit: refused', async (t) => {
  const fifo = await layout(
    'fifo',
    async (p) => {
      execFileSync('mkfifo', [p]);
    },
    text('sig'),
  );
  await t.rejects(readLayoutDescription(fifo), { code: 'NOT_A_REGULAR_FILE' });
  const zero = await layout('zero', text('{}'), (p) => symlink('/dev/zero', p));
  await t.rejects(readLayoutDescription(zero), { code: 'NOT_A_REGULAR_FILE' });
  const big = await layout('big', text('{}'), text(Buffer.alloc(4097)));
  await t.rejects(readLayoutDescription(big), { code: 'FILE_TOO_LARGE' });
});
