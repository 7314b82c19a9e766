// The `bundle` CLI's contract: --help of every command exits 0 and names its options; usage
// errors exit 2; every other error is one stderr line "bundle: CODE: message" with exit 1
// (and a JSON error object on stdout under --json); --json outputs parse; keygen writes a
// 0600 private key and refuses to overwrite it without --force; inspect shows the images and
// the signer fingerprint keygen printed. Images come from an OCI layout: no registry here.
import t from 'tap';
import { lstat, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeImageLayout } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, keygen, listDir, sh, q } from './lib.js';

const work = await tmpdir(t, 'ob-cli-');
const layout = path.join(work, 'layout');
const img = await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'srv/cli': 'cli test' }] }],
});
const imageSpec = `oci:${layout}:v1=registry.example.com/cli/app:v1`;

t.test('--help of each command exits 0 and names its options', async (t) => {
  const expect: Record<string, string[]> = {
    '': ['keygen', 'create', 'inspect', 'verify', 'extract', '--version', '--help'],
    keygen: ['--out', '--type', 'ecdsa-p256', 'ed25519', '--force', '--json'],
    create: [
      '--release',
      '--image',
      '--images-file',
      '--arch',
      '--all-platforms',
      '--version',
      '--name',
      '--upgrade-from',
      '--release-signature',
      '--signature-store',
      '--release-keyring',
      '--key',
      '--output',
      '--cache',
      '--jobs',
      '--authfile',
      '--tls-verify',
      '--registries-conf',
      '--level',
      '--quiet',
      '--json',
    ],
    inspect: ['<file>', '--json'],
    verify: ['<file>', '--key', '--digest', '--json'],
    extract: ['<file>', '<dir>', '--key', '--digest', '--json', '--quiet'],
  };
  const runs = await Promise.all(
    Object.keys(expect).map((cmd) => bundle(cmd ? [cmd, '--help'] : ['--help'])),
  );
  for (const [k, [cmd, words]] of Object.entries(expect).entries()) {
    const r = runs[k]!;
    t.equal(r.code, 0, `bundle ${cmd} --help exits 0`);
    t.match(
      r.stdout,
      new RegExp(`^Usage: bundle${cmd ? ` ${cmd}` : ''} `),
      `${cmd || 'bundle'}: usage on stdout`,
    );
    for (const w of words) t.ok(r.stdout.includes(w), `bundle ${cmd} --help names ${w}`);
  }
  const help = await bundle(['help', 'verify']);
  t.equal(help.code, 0, 'bundle help verify');
  t.match(help.stdout, /^Usage: bundle verify/);
  const version = await bundle(['--version']);
  t.equal(version.code, 0);
  t.match(version.stdout.trim(), /^\d+\.\d+\.\d+/);
});

t.test('bad usage exits 2', async (t) => {
  const cases: [string, string[]][] = [
    ['no command', []],
    ['unknown command', ['frobnicate']],
    ['unknown option', ['create', '--frobnicate']],
    ['create without --key and --output', ['create', '--image', imageSpec]],
    ['create with --jobs 0', ['create', '--key', 'k', '-o', 'o', '--jobs', '0']],
    ['create with --level 25', ['create', '--key', 'k', '-o', 'o', '--level', '25']],
    ['create with --tls-verify=maybe', ['create', '--key', 'k', '-o', 'o', '--tls-verify=maybe']],
    ['keygen without --out', ['keygen']],
    ['keygen --type rsa', ['keygen', '--out', path.join(work, 'never'), '--type', 'rsa']],
    ['verify without a file', ['verify']],
    ['verify --digest that is no digest', ['verify', 'x.bundle', '--digest', 'abc']],
    ['inspect with two files', ['inspect', 'a', 'b']],
    ['extract without a directory', ['extract', 'x.bundle']],
  ];
  const runs = await Promise.all(cases.map(([, args]) => bundle(args)));
  for (const [k, [what]] of cases.entries()) {
    const r = runs[k]!;
    t.equal(r.code, 2, `${what}: exit 2`);
    t.notOk(errorCode(r.stderr), `${what}: a usage message, not an error code`);
  }
  t.same(
    (await listDir(work)).filter((f) => f.startsWith('never')),
    [],
    'keygen with a bad --type wrote nothing',
  );
});

t.test('keygen: 0600 key, .pub beside it, no overwrite without --force', async (t) => {
  const dir = await tmpdir(t);
  const prefix = path.join(dir, 'site');
  const r = await bundle(['keygen', '--out', prefix]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /fingerprint sha256:[0-9a-f]{64}/);
  t.equal((await stat(`${prefix}.key`)).mode & 0o777, 0o600, 'private key mode 0600');
  t.match(await readFile(`${prefix}.key`, 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
  t.match(await readFile(`${prefix}.pub`, 'utf8'), /^-----BEGIN PUBLIC KEY-----/);
  const key = await readFile(`${prefix}.key`);

  const again = await bundle(['keygen', '--out', prefix]);
  t.equal(again.code, 1);
  t.equal(errorCode(again.stderr), 'KEY_ERROR', 'refuses to overwrite');
  t.equal(again.stderr.trimEnd().split('\n').length, 1);
  t.ok((await readFile(`${prefix}.key`)).equals(key), 'the existing key is untouched');

  const forced = await bundle([
    'keygen',
    '--out',
    prefix,
    '--force',
    '--type',
    'ed25519',
    '--json',
  ]);
  t.equal(forced.code, 0, forced.stderr);
  const j = JSON.parse(forced.stdout);
  t.same(Object.keys(j).sort(), ['fingerprint', 'privateKey', 'publicKey', 'type']);
  t.equal(j.type, 'ed25519');
  t.notOk((await readFile(`${prefix}.key`)).equals(key), '--force replaced it');
  t.equal((await stat(`${prefix}.key`)).mode & 0o777, 0o600, 'still 0600 after --force');
  const fp = await sh(`openssl pkey -pubin -in ${q(`${prefix}.pub`)} -outform DER | sha256sum`);
  t.equal(
    j.fingerprint,
    `sha256:${fp.stdout.split(' ')[0]}`,
    'fingerprint = sha256 of the DER public key',
  );

  // an existing, wider-open file is not silently kept at its old mode
  const loose = path.join(dir, 'loose');
  await writeFile(`${loose}.key`, 'old', { mode: 0o644 });
  const overwrite = await bundle(['keygen', '--out', loose, '--force']);
  t.equal(overwrite.code, 0, overwrite.stderr);
  t.equal((await stat(`${loose}.key`)).mode & 0o777, 0o600, '--force over a 0644 file leaves 0600');
});

t.test(
  'keygen --force over a symlink at the key path: the link is replaced, never written through',
  async (t) => {
    const dir = await tmpdir(t);
    const outside = path.join(dir, 'someone-elses-file');
    await writeFile(outside, 'theirs\n', { mode: 0o644 });
    const prefix = path.join(dir, 'planted');
    await symlink(outside, `${prefix}.key`);
    const r = await bundle(['keygen', '--out', prefix, '--force']);
    t.equal(r.code, 0, r.stderr);
    t.equal(await readFile(outside, 'utf8'), 'theirs\n', 'the outside file is unchanged');
    t.equal((await stat(outside)).mode & 0o777, 0o644, 'and keeps its mode');
    const key = await lstat(`${prefix}.key`);
    t.ok(key.isFile(), 'the key is a regular file, not the link');
    t.equal(key.mode & 0o777, 0o600, 'mode 0600');
    t.match(await readFile(`${prefix}.key`, 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
  },
);

t.test('--json outputs, inspect, and one-line errors', async (t) => {
  const dir = await tmpdir(t);
  const keys = await keygen(dir, 'factory');
  const output = path.join(dir, 'cli.bundle');
  const c = await bundle([
    'create',
    '--json',
    '--version',
    '7.0',
    '--name',
    'cli test',
    '--upgrade-from',
    '6.9',
    '--image',
    imageSpec,
    '--key',
    keys.key,
    '-o',
    output,
    '--cache',
    path.join(dir, 'cache'),
  ]);
  t.equal(c.code, 0, c.stderr);
  t.match(c.stderr, /^fetching 3 blobs of 1 image/m, '--json: progress still goes to stderr');
  t.notMatch(c.stdout, /fetching|writing/, 'and stdout holds only the JSON');
  const cj = JSON.parse(c.stdout);
  t.equal(cj.output, output);
  t.equal(cj.images, 1);
  t.equal(cj.blobs, 3);
  t.match(cj.digest, /^sha256:[0-9a-f]{64}$/);
  t.equal(
    cj.digest,
    `sha256:${(await readFile(`${output}.sha256`, 'utf8')).split(' ')[0]}`,
    'the digest in .sha256',
  );
  t.equal(cj.size, (await stat(output)).size);
  t.equal(cj.signer.fingerprint, keys.fingerprint);

  const i = await bundle(['inspect', output, '--json']);
  t.equal(i.code, 0, i.stderr);
  const ij = JSON.parse(i.stdout);
  t.equal(ij.signer.fingerprint, keys.fingerprint, 'inspect shows the fingerprint keygen printed');
  t.equal(ij.signer.algorithm, 'ecdsa-p256-sha256');
  t.same(ij.images, [
    {
      reference: 'registry.example.com/cli/app:v1',
      digest: img.digest,
      platforms: ['linux/amd64'],
    },
  ]);
  t.same(ij.release, {
    name: 'cli test',
    version: '7.0',
    arch: 'amd64',
    image: null,
    digest: null,
    upgradeFrom: ['6.9'],
  });
  t.equal(ij.blobs, 3);
  const text = await bundle(['inspect', output]);
  t.equal(text.code, 0);
  t.ok(text.stdout.includes(keys.fingerprint), 'human inspect names the signer');
  t.ok(text.stdout.includes('registry.example.com/cli/app:v1'));

  const v = await bundle(['verify', output, '--key', keys.pub, '--json']);
  t.equal(v.code, 0, v.stderr);
  t.match(JSON.parse(v.stdout), {
    valid: true,
    digest: cj.digest,
    size: cj.size,
    signer: keys.fingerprint,
  });
  const vd = await bundle(['verify', output, '--digest', cj.digest, '--json']);
  t.equal(vd.code, 0, `digest-only trust: ${vd.stderr}`);
  t.equal(JSON.parse(vd.stdout).signer, null);

  const x = await bundle(['extract', output, path.join(dir, 'x'), '--key', keys.pub, '--json']);
  t.equal(x.code, 0, x.stderr);
  t.match(JSON.parse(x.stdout), {
    extracted: path.join(dir, 'x'),
    digest: cj.digest,
    images: 1,
    blobs: 3,
  });
  t.equal((await bundleJson(output)).images[0]!.digest, img.digest);

  const other = await keygen(dir, 'other');
  const errors: [string, string[], string][] = [
    ['verify without trust', ['verify', output], 'NO_TRUST'],
    ['verify with another key', ['verify', output, '--key', other.pub], 'UNTRUSTED_KEY'],
    [
      'verify with a wrong digest',
      ['verify', output, '--digest', `sha256:${'0'.repeat(64)}`],
      'FILE_DIGEST_MISMATCH',
    ],
    [
      'verify a missing file',
      ['verify', path.join(dir, 'missing.bundle'), '--key', keys.pub],
      'IO_ERROR',
    ],
    [
      'verify with a missing --key file',
      ['verify', output, '--key', path.join(dir, 'nope.pub')],
      'KEY_ERROR',
    ],
    ['inspect a file that is not a bundle', ['inspect', keys.pub], 'CORRUPT'],
    [
      'create signing with the .pub',
      [
        'create',
        '--version',
        '1',
        '--image',
        imageSpec,
        '--key',
        keys.pub,
        '-o',
        path.join(dir, 'p.bundle'),
      ],
      'KEY_ERROR',
    ],
    [
      'create with nothing to bundle',
      ['create', '--version', '1', '--key', keys.key, '-o', path.join(dir, 'p.bundle')],
      'INVALID_CONFIG',
    ],
    [
      'create with a missing --images-file',
      [
        'create',
        '--version',
        '1',
        '--images-file',
        path.join(dir, 'none.txt'),
        '--key',
        keys.key,
        '-o',
        path.join(dir, 'p.bundle'),
      ],
      'INVALID_CONFIG',
    ],
    [
      'extract into a non-empty directory',
      ['extract', output, path.join(dir, 'x'), '--key', keys.pub],
      'IO_ERROR',
    ],
  ];
  // every error also under --json for a few of them (each run is a node start-up)
  const withJson = new Set(['NO_TRUST', 'UNTRUSTED_KEY', 'CORRUPT', 'INVALID_CONFIG']);
  const runs = await Promise.all(
    errors.map(([, args, code]) =>
      Promise.all([bundle(args), withJson.has(code) ? bundle([...args, '--json']) : undefined]),
    ),
  );
  for (const [k, [what, , code]] of errors.entries()) {
    const [r, j] = runs[k]!;
    t.equal(r.code, 1, `${what}: exit 1`);
    // progress lines (verify and extract report theirs) may come first; the error is one line
    const lines = r.stderr
      .trimEnd()
      .split('\n')
      .filter((l) => !/^(verifying|extracting) \S+: /.test(l));
    t.equal(lines.length, 1, `${what}: one error line on stderr`);
    t.match(lines[0], new RegExp(`^bundle: ${code}: \\S`), `${what}: bundle: ${code}: ...`);
    if (!j) continue;
    t.equal(j.code, 1);
    t.equal(
      JSON.parse(j.stdout).error.code,
      code,
      `${what}: --json gives {"error":{"code":"${code}"}}`,
    );
  }
  t.same(
    (await listDir(dir)).filter((f) => f.startsWith('p.bundle')),
    [],
    'failed creates wrote nothing',
  );

  const missing = await bundle(['inspect', path.join(dir, 'missing.bundle')]);
  t.equal(missing.code, 1);
  t.equal(errorCode(missing.stderr), 'IO_ERROR', 'inspect of a missing file');
});
