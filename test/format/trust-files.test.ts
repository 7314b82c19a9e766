// Key files as loadTrust reads them for both CLIs and the agent: bounded, regular files
// only, and refused (or, when asked, warned about) when others could change them.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FormatError, MAX_KEY_FILE_BYTES, loadPrivateKey, loadTrust } from '@offline-bundle/format';
import { makeKey, tmpdir, writeKeyFiles } from './craft.js';

const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as FormatError & { cause?: { code?: string } });

t.test('key files are bounded and must be regular files', async (t) => {
  const dir = await tmpdir(t);
  const started = Date.now();
  const dev = await failure(loadTrust(['/dev/urandom']));
  t.equal(dev?.code, 'KEY_ERROR', '/dev/urandom: KEY_ERROR');
  t.equal(dev?.cause?.code, 'NOT_A_REGULAR_FILE', 'because it is a device');
  t.ok(Date.now() - started < 2000, 'at once, nothing read');
  const fifo = join(dir, 'fifo.pub');
  execFileSync('mkfifo', [fifo]);
  t.equal((await failure(loadTrust([fifo])))?.cause?.code, 'NOT_A_REGULAR_FILE', 'a FIFO: refused, not waited on');
  t.equal((await failure(loadPrivateKey(fifo)))?.code, 'KEY_ERROR', 'the signing key too');
  const big = join(dir, 'big.pub');
  const key = makeKey();
  await writeFile(big, key.publicPem + ' '.repeat(MAX_KEY_FILE_BYTES));
  const over = await failure(loadTrust([big]));
  t.equal(over?.code, 'KEY_ERROR');
  t.equal(over?.cause?.code, 'FILE_TOO_LARGE', `over ${MAX_KEY_FILE_BYTES} bytes`);
});

t.test('a key others could change is refused, or warned about when asked', async (t) => {
  const dir = await tmpdir(t);
  await chmod(dir, 0o755);
  const { pubPath } = await writeKeyFiles(dir, makeKey());
  await chmod(pubPath, 0o644);
  t.equal((await loadTrust([pubPath])).keys?.length, 1, '0644: trusted');
  for (const mode of [0o666, 0o646, 0o664]) {
    await chmod(pubPath, mode);
    const err = await failure(loadTrust([pubPath]));
    t.equal(err?.code, 'UNSAFE_PERMISSIONS', `mode ${mode.toString(8)}: UNSAFE_PERMISSIONS`);
    t.ok(err?.message.includes(`chmod go-w ${pubPath}`), 'the message names the fix');
    const warnings: string[] = [];
    const trust = await loadTrust([pubPath], undefined, { onUnsafeKey: (m) => warnings.push(m) });
    t.equal(trust.keys?.length, 1, 'with a warning callback: loaded');
    t.equal(warnings.length, 1, 'and warned once');
  }
  await chmod(pubPath, 0o644);
  if (process.getuid?.() === 0) {
    execFileSync('chown', ['4321', pubPath]);
    t.equal((await failure(loadTrust([pubPath])))?.code, 'UNSAFE_PERMISSIONS', 'owned by someone else');
  }
});
