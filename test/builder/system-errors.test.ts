// System errors are one line naming the path, the problem and the fix, never Node's raw
// "EACCES: EACCES: permission denied, mkdir '/x'" with the code twice; the blob cache (the
// default one under $HOME too) is checked before anything is fetched.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, errorCode, keygen, listDir } from './lib.js';

const work = await tmpdir(t, 'ob-syserr-');
const keys = await keygen(work);
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'srv/a': 'a' }] }],
});
const image = `oci:${layout}:v1=registry.example.com/app:v1`;
const aFile = path.join(work, 'a-file');
await writeFile(aFile, 'not a directory');
const oneLine = (
  t: { teardown: (fn: () => unknown) => void; skip: (m: string) => void },
  stderr: string,
) => {
  t.equal(stderr.trimEnd().split('\n').length, 1, `one line: ${stderr}`);
  t.notMatch(stderr, /\b(E[A-Z]+): \1\b/, 'the code once');
  t.notMatch(stderr, /, (mkdir|open|scandir|unlink) '/, "not Node's raw text");
};

/** A read-only tmpfs, as an unwritable $HOME or someone else's cache looks to root. */
function readOnly(
  t: { teardown: (fn: () => unknown) => void; skip: (m: string) => void },
  dir: string,
): boolean {
  try {
    execFileSync('mkdir', ['-p', dir]);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', dir], { stdio: 'ignore' });
    t.teardown(() => execFileSync('umount', ['-l', dir]));
    return true;
  } catch {
    return false;
  }
}

t.test('create: the default cache under an unwritable HOME is refused up front', async (t) => {
  const home = path.join(work, 'home-ro');
  if (!readOnly(t, home)) return t.skip('cannot mount a tmpfs here');
  const out = path.join(work, 'out1', 'x.bundle');
  const r = await bundle(
    ['create', '--version', '1.0', '--image', image, '--key', keys.key, '-o', out],
    { env: { HOME: home, XDG_CACHE_HOME: undefined } },
  );
  t.equal(r.code, 1);
  t.equal(errorCode(r.stderr), 'NOT_WRITABLE');
  t.match(
    r.stderr,
    `cannot use ${path.join(home, '.cache', 'offline-bundle')} as the blob cache (read-only filesystem): pass --cache DIR (or set XDG_CACHE_HOME) to a writable directory`,
  );
  oneLine(t, r.stderr);
  t.same(await listDir(path.dirname(out)), []);
});

t.test('create: --cache that is a file, or on a read-only disk', async (t) => {
  const out = path.join(work, 'out2', 'x.bundle');
  const file = await bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--key',
    keys.key,
    '-o',
    out,
    '--cache',
    aFile,
  ]);
  t.equal(file.code, 1);
  t.equal(errorCode(file.stderr), 'INVALID_CONFIG');
  t.match(
    file.stderr,
    `the blob cache ${aFile} is not a directory: pass --cache a writable directory`,
  );
  oneLine(t, file.stderr);
  const under = await bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--key',
    keys.key,
    '-o',
    out,
    '--cache',
    path.join(aFile, 'cache'),
  ]);
  t.equal(errorCode(under.stderr), 'NOT_WRITABLE', under.stderr);
  t.match(
    under.stderr,
    /a part of the path is a file, not a directory\): pass --cache a writable directory/,
  );
  oneLine(t, under.stderr);
  const ro = path.join(work, 'cache-ro');
  if (!readOnly(t, ro)) return;
  const r = await bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--key',
    keys.key,
    '-o',
    out,
    '--cache',
    ro,
  ]);
  t.equal(errorCode(r.stderr), 'NOT_WRITABLE', r.stderr);
  t.match(r.stderr, `cannot use ${ro} as the blob cache (read-only filesystem)`);
  oneLine(t, r.stderr);
});

t.test(
  'cache info / prune and extract: errno errors name the path and the fix, the code once',
  async (t) => {
    const info = await bundle(['cache', 'info', '--cache', aFile]);
    t.equal(info.code, 1);
    t.equal(errorCode(info.stderr), 'ENOTDIR');
    t.match(
      info.stderr,
      `bundle: ENOTDIR: cannot read the directory ${aFile}/blobs/sha256: a part of the path is a file, not a directory; check the path`,
    );
    oneLine(t, info.stderr);

    // a cache someone else owns: here a read-only one with a blob in it
    const cache = path.join(work, 'cache-ok');
    const made = await bundle([
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--image',
      image,
      '--key',
      keys.key,
      '-o',
      path.join(work, 'ok.bundle'),
      '--cache',
      cache,
    ]);
    t.equal(made.code, 0, made.stderr);
    const ro = path.join(work, 'cache-ro2');
    await mkdir(ro);
    execFileSync('cp', ['-a', `${cache}/.`, ro]);
    try {
      execFileSync('mount', ['--bind', ro, ro]);
      execFileSync('mount', ['-o', 'remount,bind,ro', ro]);
      t.teardown(() => execFileSync('umount', ['-l', ro]));
      const prune = await bundle(['cache', 'prune', '--cache', ro]);
      t.equal(prune.code, 1);
      t.equal(errorCode(prune.stderr), 'EROFS');
      t.match(
        prune.stderr,
        new RegExp(
          `^bundle: EROFS: cannot (remove|open|create the directory) ${ro}/(blobs/sha256/[0-9a-f]{64}|locks|locks/prune\\.\\d+): read-only filesystem; use a writable disk\\n$`,
        ),
      );
      oneLine(t, prune.stderr);
    } catch (err) {
      t.comment(`no read-only bind mount here: ${String(err)}`);
    }

    const extract = await bundle([
      'extract',
      path.join(work, 'ok.bundle'),
      aFile,
      '--key',
      keys.pub,
    ]);
    t.equal(extract.code, 1);
    t.match(extract.stderr, new RegExp(`^bundle: ENOTDIR: cannot [a-z ]+ ${aFile}`));
    oneLine(t, extract.stderr);
  },
);
