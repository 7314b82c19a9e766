// Every file a user names to `bundle` is read with a size bound and refused when it is a FIFO or
// a device (issue 28 item 1): release signatures, keyrings, signature-store files, kubeconfigs,
// oci:/dir:/docker-archive: sources. And an OpenPGP compression bomb is cut at 64 KiB of output.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-hostile-files-');
const keys = await keygen(work);
const rel = await pushImage(
  {
    tag: '4.15.1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [releaseFiles({ version: '4.15.1', previous: ['4.15.0'], images: {} })],
      },
    ],
  },
  `${reg.host}/ocp/release:4.15.1`,
);
const fifo = path.join(work, 'fifo');
execFileSync('mkfifo', [fifo]);
const big = path.join(work, 'big.sig');
await writeFile(big, Buffer.alloc(600 * 1024, 0x41));

/** A binary OpenPGP message: a zlib Compressed Data packet holding a Literal Data packet of `n` zeros. */
function compressionBomb(n: number): Buffer {
  const len = (x: number) => {
    const b = Buffer.alloc(5);
    b[0] = 0xff;
    b.writeUInt32BE(x, 1);
    return b;
  };
  const literalBody = Buffer.concat([Buffer.from([0x62, 0, 0, 0, 0, 0]), Buffer.alloc(n)]);
  const literal = Buffer.concat([Buffer.from([0xc0 | 11]), len(literalBody.length), literalBody]);
  const compressedBody = Buffer.concat([Buffer.from([2]), deflateSync(literal, { level: 9 })]);
  return Buffer.concat([Buffer.from([0xc0 | 8]), len(compressedBody.length), compressedBody]);
}
const bomb = path.join(work, 'bomb.sig');
const bombBytes = compressionBomb(48 * 1024 * 1024);
await writeFile(bomb, bombBytes);

let n = 0;
async function create(args: string[]) {
  const output = path.join(work, `run-${++n}`, 'r.bundle');
  await mkdir(path.dirname(output), { recursive: true });
  return bundle([
    'create',
    '--quiet',
    '--tls-verify=false',
    '--key',
    keys.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    output,
    '--release',
    rel.ref,
    ...args,
  ]);
}

t.test(
  '--release-signature: a file over 64 KiB, a FIFO, /dev/zero: refused before any read past the bound',
  async (t) => {
    for (const [name, file, code] of [
      ['600 KiB', big, 'FILE_TOO_LARGE'],
      ['a FIFO', fifo, 'NOT_A_REGULAR_FILE'],
      ['/dev/zero', '/dev/zero', 'NOT_A_REGULAR_FILE'],
    ] as const) {
      const r = await create(['--release-signature', file]);
      t.equal(errorCode(r.stderr), code, `${name}: ${r.stderr.trim()}`);
      t.match(r.stderr, /--release-signature /, `${name}: names the flag`);
    }
  },
);

t.test(
  `--release-signature: an OpenPGP compression bomb (${bombBytes.length} bytes → 48 MiB) is cut at 64 KiB decompressed`,
  async (t) => {
    t.ok(bombBytes.length < 64 * 1024, 'the bomb itself is under the file bound');
    const r = await create(['--release-signature', bomb]);
    t.equal(errorCode(r.stderr), 'BAD_RELEASE_SIGNATURE', r.stderr);
    t.match(r.stderr, /Maximum decompressed message size exceeded/);
  },
);

t.test(
  '--release-keyring and --signature-store file:// with a FIFO: refused, not waited on',
  async (t) => {
    const sig = path.join(work, 'sig');
    await writeFile(sig, 'x');
    const k = await create(['--release-signature', sig, '--release-keyring', fifo]);
    t.equal(errorCode(k.stderr), 'NOT_A_REGULAR_FILE', k.stderr);
    const store = path.join(work, 'store', `sha256=${rel.digest.slice(7)}`);
    await mkdir(store, { recursive: true });
    execFileSync('mkfifo', [path.join(store, 'signature-1')]);
    const s = await create(['--signature-store', `file://${path.join(work, 'store')}`]);
    t.equal(errorCode(s.stderr), 'BAD_RELEASE_SIGNATURE', s.stderr);
    t.match(s.stderr, /FIFO/);
  },
);

t.test(
  'sources: oci: with a FIFO index.json, dir: with /dev/zero as its version, docker-archive: of a FIFO',
  async (t) => {
    const layout = path.join(work, 'layout');
    await mkdir(layout);
    execFileSync('mkfifo', [path.join(layout, 'index.json')]);
    const o = await bundle([
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--key',
      keys.key,
      '-o',
      path.join(work, 'o.bundle'),
      '--image',
      `oci:${layout}`,
    ]);
    t.equal(errorCode(o.stderr), 'NOT_A_REGULAR_FILE', o.stderr);
    const dir = path.join(work, 'dirsrc');
    await mkdir(dir);
    execFileSync('ln', ['-s', '/dev/zero', path.join(dir, 'version')]);
    const d = await bundle([
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--key',
      keys.key,
      '-o',
      path.join(work, 'd.bundle'),
      '--image',
      `dir:${dir}`,
    ]);
    t.equal(errorCode(d.stderr), 'NOT_A_REGULAR_FILE', d.stderr);
    const a = await bundle([
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--key',
      keys.key,
      '-o',
      path.join(work, 'a.bundle'),
      '--image',
      `docker-archive:${fifo}`,
    ]);
    t.equal(errorCode(a.stderr), 'NOT_A_REGULAR_FILE', a.stderr);
  },
);

t.test(
  'bundle cluster prepare/upgrade with a FIFO or /dev/zero as the bundle: refused before the cluster is asked',
  async (t) => {
    for (const cmd of ['prepare', 'upgrade']) {
      for (const file of [fifo, '/dev/zero']) {
        const r = await bundle([
          'cluster',
          cmd,
          file,
          '--key',
          keys.pub,
          '--kubeconfig',
          path.join(work, 'none'),
        ]);
        t.equal(r.code, 1);
        t.match(r.stderr, /not a regular file/, `${cmd} ${file}: ${r.stderr.trim()}`);
      }
    }
  },
);

t.test('bundle cluster --kubeconfig FIFO or /dev/zero: KUBECONFIG, at once', async (t) => {
  for (const file of [fifo, '/dev/zero']) {
    const r = await bundle(['cluster', 'status', '--kubeconfig', file]);
    t.equal(errorCode(r.stderr), 'KUBECONFIG', r.stderr);
    t.match(r.stderr, /not a regular file/);
  }
});
