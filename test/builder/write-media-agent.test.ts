// `bundle write-media` takes the agent image (bundle-agent-VERSION-ARCH.oci.tar and its .sig,
// written beside the bundle by `create --agent-image`) onto the stick with the bundle, on real
// ext4 loop images: room counted for both before anything is written, the pair checked against
// its statement as read and as read back, the same pair already there kept, a pair that does not
// go together refused with nothing left on the stick (#39 item 6).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { skopeoCopy } from '../helpers/registry.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';
import { oneLine, skipReason, unmountLater } from './write-media-lib.js';

const AGENT = 'bundle-agent-0.9.0-amd64.oci.tar';

function ext4(
  t: { teardown(fn: () => unknown): void },
  img: string,
  mnt: string,
  sizeMiB = 32,
): Promise<void> {
  execFileSync('truncate', ['-s', `${sizeMiB}M`, img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-m', '0', img]);
  unmountLater(t, mnt);
  return mkdir(mnt).then(() => {
    execFileSync('mount', ['-o', 'loop', img, mnt]);
  });
}

/** What the stick holds, dot names (temp files) included. */
const listing = async (dir: string) =>
  (await readdir(dir)).filter((n) => n !== 'lost+found').sort();

if (skipReason) t.skip(`real filesystems: ${skipReason}`);
else await main();

async function main(): Promise<void> {
  const work = await tmpdir(t, 'ob-media-agent-');
  const keys = await keygen(work, 'factory', 'ed25519');
  const layout = path.join(work, 'layout');
  // random bytes do not compress: the agent image is some 2 MiB in the archive and in the bundle
  await writeImageLayout(layout, {
    tag: 'agent',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ 'usr/local/bin/bundle-agent': randomBytes(2 * 1024 * 1024) }],
        config: { Labels: { 'org.opencontainers.image.version': '0.9.0' } },
      },
    ],
  });
  await writeImageLayout(layout, {
    tag: 'app',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'app' }] }],
  });
  const archive = path.join(work, 'agent-src.oci.tar');
  await skopeoCopy(`oci:${layout}:agent`, `oci-archive:${archive}:0.9.0`);
  const make = async (name: string) => {
    const dir = path.join(work, name);
    await mkdir(dir);
    const out = path.join(dir, `${name}.bundle`);
    const r = await bundle([
      'create',
      '--quiet',
      '--json',
      '--key',
      keys.key,
      '--version',
      name === 'b' ? '1.1' : '1.0',
      '--cache',
      path.join(work, 'cache'),
      '--image',
      `oci:${layout}:app=registry.example.com/acme/app:${name}`,
      '--agent-image',
      `oci-archive:${archive}`,
      '-o',
      out,
    ]);
    if (r.code !== 0) throw new Error(r.stderr);
    return { dir, out, digest: JSON.parse(r.stdout).digest as string };
  };
  const a = await make('a');
  const b = await make('b');
  const pair = [AGENT, `${AGENT}.sig`];

  t.test(
    'the pair beside the bundle goes onto the stick, read back and checked; a second bundle of the same agent finds it there',
    async (t) => {
      const mnt = path.join(work, 'stick');
      await ext4(t, path.join(work, 'stick.img'), mnt);
      const r = await bundle(['write-media', a.out, mnt, '--json']);
      t.equal(r.code, 0, r.stderr);
      const j = JSON.parse(r.stdout);
      t.equal(j.digest, a.digest);
      t.same(
        j.files.map((f: string) => path.basename(f)).sort(),
        ['a.bundle', 'a.bundle.sha256', ...pair].sort(),
        'the bundle, its .sha256, the archive and its .sig',
      );
      t.match(j.agentImage, {
        version: '0.9.0',
        arch: 'amd64',
        alreadyThere: false,
        archive: path.join(mnt, AGENT),
        statement: path.join(mnt, `${AGENT}.sig`),
      });
      for (const f of pair)
        t.ok(
          (await readFile(path.join(mnt, f))).equals(await readFile(path.join(a.dir, f))),
          `${f}: byte for byte`,
        );
      t.match(
        r.stderr,
        new RegExp(`writing ${AGENT.replace(/\./g, '\\.')} and its \\.sig to `),
        'its own progress phase',
      );
      t.match(
        r.stderr,
        /reading back bundle-agent-0\.9\.0-amd64\.oci\.tar from /,
        'and its own read-back',
      );
      t.same(
        await listing(mnt),
        ['a.bundle', 'a.bundle.sha256', ...pair].sort(),
        'no temp file left',
      );

      const second = await bundle(['write-media', b.out, mnt]);
      t.equal(second.code, 0, second.stderr);
      t.match(
        second.stderr,
        /wrote b\.bundle, b\.bundle\.sha256 \(.*\); agent image 0\.9\.0 \(amd64, .*\) was there already; read back from the stick: matches/,
      );
      t.match(second.stdout, /^Done: 4 files on /, 'the pair counts among the files on the stick');
    },
  );

  t.test(
    'room: the pair is counted before anything is written; --no-agent-image writes the bundle alone',
    async (t) => {
      const mnt = path.join(work, 'small');
      // some 4.5 MiB free: the bundle (~2 MiB) fits, the bundle and the agent archive (~2 MiB more) do not
      await ext4(t, path.join(work, 'small.img'), mnt, 6);
      const r = await bundle(['write-media', a.out, mnt]);
      t.equal(errorCode(r.stderr), 'NO_SPACE', r.stderr);
      t.ok(oneLine(r.stderr), 'one line');
      t.match(r.stderr, /the agent image and its \.sig \(\d/);
      t.match(r.stderr, /nothing was written/);
      t.same(await listing(mnt), [], 'nothing written');
      const alone = await bundle([
        'write-media',
        a.out,
        mnt,
        '--no-agent-image',
        '--json',
        '--quiet',
      ]);
      t.equal(alone.code, 0, alone.stderr);
      t.notOk('agentImage' in JSON.parse(alone.stdout));
      t.same(await listing(mnt), ['a.bundle', 'a.bundle.sha256']);
    },
  );

  t.test(
    'a pair that does not go together is refused, and nothing of it or the bundle stays on the stick',
    async (t) => {
      const mnt = path.join(work, 'bad');
      await ext4(t, path.join(work, 'bad.img'), mnt);
      const sig = path.join(a.dir, `${AGENT}.sig`);
      const good = await readFile(sig, 'utf8');
      // a statement for other bytes of the same size (an archive rebuilt, its .sig not)
      await writeFile(sig, good.replace(/^sha256 [0-9a-f]{64}$/m, `sha256 ${'0'.repeat(64)}`));
      const r = await bundle(['write-media', a.out, mnt]);
      t.equal(errorCode(r.stderr), 'SOURCE_CHANGED', r.stderr);
      t.ok(oneLine(r.stderr), 'one line');
      t.match(
        r.stderr,
        /reads as another sha256 than bundle-agent-0\.9\.0-amd64\.oci\.tar\.sig says: the pair does not go together; what was written is removed/,
      );
      t.same(await listing(mnt), [], 'no bundle, no pair, no temp file');

      await rename(sig, `${sig}.away`);
      const lone = await bundle(['write-media', a.out, mnt]);
      t.equal(errorCode(lone.stderr), 'NOT_A_BUNDLE');
      t.match(lone.stderr, /oci\.tar is beside the bundle without its \.sig.*--no-agent-image/);
      await rename(`${sig}.away`, sig);
      await writeFile(sig, good);

      // named by the flag: another pair of that name on the stick needs --force
      const named = await bundle([
        'write-media',
        a.out,
        mnt,
        '--agent-image',
        sig,
        '--json',
        '--quiet',
      ]);
      t.equal(named.code, 0, named.stderr);
      await writeFile(path.join(mnt, `${AGENT}.sig`), good.replace('arch amd64', 'arch amd65'));
      const other = await bundle(['write-media', b.out, mnt]);
      t.equal(errorCode(other.stderr), 'OUTPUT_EXISTS');
      t.match(
        other.stderr,
        /already holds bundle-agent-0\.9\.0-amd64\.oci\.tar, bundle-agent-0\.9\.0-amd64\.oci\.tar\.sig of another agent image of that name: pass --force/,
      );
      const forced = await bundle(['write-media', b.out, mnt, '--force', '--json', '--quiet']);
      t.equal(forced.code, 0, forced.stderr);
      t.equal(JSON.parse(forced.stdout).agentImage.alreadyThere, false, 'written again');
      t.equal(
        await readFile(path.join(mnt, `${AGENT}.sig`), 'utf8'),
        good,
        'the right statement is on the stick',
      );
    },
  );
}

t.test('the statement: its lines read, one that is not a statement refused', async (t) => {
  const { parseStatement } = await import('../../builder/dist/write-media-agent.js');
  const text = [
    'offline-bundle-agent-image 1',
    'file x.oci.tar',
    'size 12',
    `sha256 ${'a'.repeat(64)}`,
    'manifest sha256:x',
    'image i',
    'version 1.0.0',
    'arch arm64',
    'signer s',
    'signature AAAA',
    '',
  ].join('\n');
  t.same(parseStatement(text, 's'), {
    file: 'x.oci.tar',
    size: 12,
    sha256: 'a'.repeat(64),
    version: '1.0.0',
    arch: 'arm64',
  });
  t.throws(
    () => parseStatement(text.replace('size 12', 'size twelve'), 's'),
    /its size is not a number of bytes/,
  );
  t.throws(() => parseStatement('hello\n', 'f.sig'), /f\.sig is not an agent image statement/);
  t.throws(() => parseStatement(text.replace(/signature .*\n/, ''), 's'), /no signature line/);
});
