// The agent image beside the bundle (builder/src/agent-sidecar.ts): `bundle create --agent-image`
// and `bundle agent-image export` write bundle-agent-VERSION-ARCH.oci.tar and a signed statement
// that a node checks with nothing but openssl and sha256sum, and loads with skopeo.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, keygen, makeSidecar } from './lib.js';

const work = await tmpdir(t, 'ob-sidecar-');
const ecdsa = await keygen(work, 'factory');
const ed = await keygen(work, 'ed', 'ed25519');
const s = await makeSidecar(work, ecdsa, { version: '0.9.0', layerBytes: 100_000 });

/** openssl, as the bootstrap runs it: the statement's signed lines against the public key. */
function opensslVerifies(statement: string, pub: string, ed25519: boolean): boolean {
  const text = execFileSync('cat', [statement], { encoding: 'utf8' });
  const lines = text.split('\n').filter(Boolean);
  const signed = path.join(work, 'signed');
  const sig = path.join(work, 'sig');
  execFileSync('sh', [
    '-c',
    `head -n -1 "$1" > "$2" && tail -n 1 "$1" | cut -d' ' -f2 | base64 -d > "$3"`,
    'sh',
    statement,
    signed,
    sig,
  ]);
  if (lines.length !== 10)
    throw new Error(`${statement}: ${lines.length} lines, not nine signed lines and the signature`);
  const args = ed25519
    ? ['pkeyutl', '-verify', '-pubin', '-inkey', pub, '-rawin', '-in', signed, '-sigfile', sig]
    : ['dgst', '-sha256', '-verify', pub, '-signature', sig, signed];
  return spawnSync('openssl', args).status === 0;
}

t.test(
  'create --agent-image writes the archive and a statement openssl verifies; skopeo loads the archive by the signed manifest digest',
  async (t) => {
    t.strictSame(
      (await readdir(s.dir)).sort(),
      [
        path.basename(s.archive),
        path.basename(s.statement),
        path.basename(s.bundle),
        `${path.basename(s.bundle)}.sha256`,
      ].sort(),
    );
    const text = await readFile(s.statement, 'utf8');
    const data = await readFile(s.archive);
    const field = (k: string) => new RegExp(`^${k} (.*)$`, 'm').exec(text)?.[1];
    t.equal(text.split('\n')[0], 'offline-bundle-agent-image 1');
    t.equal(field('file'), path.basename(s.archive));
    t.equal(field('size'), String(data.length));
    t.equal(field('sha256'), createHash('sha256').update(data).digest('hex'));
    t.equal(field('manifest'), s.manifest);
    t.equal(field('image'), 'localhost/offline-bundle/bundle-agent:0.9.0');
    t.equal(field('version'), '0.9.0');
    t.equal(field('arch'), 'amd64');
    t.equal(field('signer'), ecdsa.fingerprint);
    t.ok(
      opensslVerifies(s.statement, ecdsa.pub, false),
      'openssl dgst -sha256 -verify accepts it (ECDSA P-256)',
    );
    t.notOk(opensslVerifies(s.statement, ed.pub, true), 'and another key does not');
    await writeFile(path.join(work, 'tampered'), text.replace('arch amd64', 'arch arm64'));
    t.notOk(
      opensslVerifies(path.join(work, 'tampered'), ecdsa.pub, false),
      'a changed line breaks the signature',
    );
    const store = path.join(work, 'store');
    execFileSync('skopeo', [
      'copy',
      '--quiet',
      `oci-archive:${s.archive}`,
      `containers-storage:[vfs@${store}/root+${store}/run]localhost/offline-bundle/bundle-agent:0.9.0`,
    ]);
    t.equal(
      execFileSync(
        'skopeo',
        [
          'inspect',
          '--format',
          '{{.Digest}}',
          `containers-storage:[vfs@${store}/root+${store}/run]localhost/offline-bundle/bundle-agent:0.9.0`,
        ],
        { encoding: 'utf8' },
      ).trim(),
      s.manifest,
    );
  },
);

t.test(
  "a multi-arch agent image (what pnpm package writes): the bundle's platform goes beside it, named by its own manifest digest",
  async (t) => {
    const layout = path.join(work, 'layout-multi');
    const img = await writeImageLayout(layout, {
      tag: 'agent',
      platforms: ['amd64', 'arm64'].map((architecture) => ({
        os: 'linux',
        architecture,
        layers: [{ 'usr/local/bin/bundle-agent': Buffer.from(architecture) }],
        config: { Labels: { 'org.opencontainers.image.version': '0.9.1' } },
      })),
    });
    const amd64 = img.manifests.find(
      (m: { platform: { architecture: string } }) => m.platform.architecture === 'amd64',
    ).digest;
    const out = path.join(work, 'out-multi', 'release.bundle');
    const r = await bundle([
      'create',
      '--quiet',
      '--key',
      ecdsa.key,
      '--version',
      '1.0.0',
      '--arch',
      'amd64',
      '--cache',
      path.join(work, 'cache'),
      '--agent-image',
      `oci:${layout}:agent`,
      '-o',
      out,
    ]);
    t.equal(r.code, 0, r.stderr);
    const archive = path.join(work, 'out-multi', 'bundle-agent-0.9.1-amd64.oci.tar');
    const text = await readFile(`${archive}.sig`, 'utf8');
    t.equal(
      /^manifest (.*)$/m.exec(text)?.[1],
      amd64,
      'the statement names the linux/amd64 manifest, not the index',
    );
    t.ok(opensslVerifies(`${archive}.sig`, ecdsa.pub, false), 'signed');
    const store = path.join(work, 'store-multi');
    execFileSync('skopeo', [
      'copy',
      '--quiet',
      `oci-archive:${archive}`,
      `containers-storage:[vfs@${store}/root+${store}/run]localhost/offline-bundle/bundle-agent:0.9.1`,
    ]);
    t.equal(
      execFileSync(
        'skopeo',
        [
          'inspect',
          '--format',
          '{{.Digest}}',
          `containers-storage:[vfs@${store}/root+${store}/run]localhost/offline-bundle/bundle-agent:0.9.1`,
        ],
        { encoding: 'utf8' },
      ).trim(),
      amd64,
      'loaded by that digest',
    );
  },
);

t.test(
  'agent-image export: the same files from a bundle (Ed25519 too), --json, OUTPUT_EXISTS without --force',
  async (t) => {
    const eds = await makeSidecar(work, ed, { version: '1.2.3-rc.1' });
    const out = path.join(work, 'exported');
    const r = await bundle([
      'agent-image',
      'export',
      eds.bundle,
      '--key',
      ed.key,
      '-o',
      out,
      '--json',
    ]);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.equal(j.archive, path.join(out, 'bundle-agent-1.2.3-rc.1-amd64.oci.tar'));
    t.equal(j.manifest, eds.manifest);
    t.same(
      await readFile(j.archive),
      await readFile(eds.archive),
      'the same bytes as create wrote (reproducible)',
    );
    t.ok(opensslVerifies(j.statement, ed.pub, true), 'openssl pkeyutl -rawin accepts it (Ed25519)');
    const again = await bundle(['agent-image', 'export', eds.bundle, '--key', ed.key, '-o', out]);
    t.equal(again.code, 1);
    t.match(
      again.stderr,
      /^bundle: OUTPUT_EXISTS: .*bundle-agent-1\.2\.3-rc\.1-amd64\.oci\.tar exists: pass --force to replace it\n$/,
    );
    const forced = await bundle([
      'agent-image',
      'export',
      eds.bundle,
      '--key',
      ed.key,
      '-o',
      out,
      '--force',
    ]);
    t.equal(forced.code, 0, forced.stderr);
    t.match(
      forced.stdout,
      /^wrote .*bundle-agent-1\.2\.3-rc\.1-amd64\.oci\.tar \(bundle-agent 1\.2\.3-rc\.1, amd64, sha256:[0-9a-f]{64}\) and its signed statement .*\.sig: copy both onto the stick/,
    );
    t.strictSame(
      (await readdir(out)).filter((f) => f.startsWith('.')),
      [],
      'no temporary file left',
    );
  },
);

t.test('create --agent-image --json names the two files', async (t) => {
  const layout = path.join(work, 'json-layout');
  await writeImageLayout(layout, {
    tag: 'agent',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [{ a: 'agent' }],
        config: { Labels: { 'org.opencontainers.image.version': '2.0.0' } },
      },
    ],
  });
  const out = path.join(work, 'json', 'x.bundle');
  const r = await bundle([
    'create',
    '--quiet',
    '--json',
    '--key',
    ecdsa.key,
    '--version',
    '1.0.0',
    '--cache',
    path.join(work, 'cache'),
    '--agent-image',
    `oci:${layout}:agent`,
    '-o',
    out,
  ]);
  t.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  t.equal(j.agentSidecar.archive, path.join(work, 'json', 'bundle-agent-2.0.0-amd64.oci.tar'));
  t.equal(j.agentSidecar.statement, `${j.agentSidecar.archive}.sig`);
  t.equal(j.agentSidecar.manifest, j.agent.digest, "the bundle's agent image");
  t.equal(r.stdout.trim().split('\n').length, 1, 'one JSON document');
});

t.test(
  "agent-image export refuses: another key than the bundle's, a bundle without an agent image",
  async (t) => {
    const wrong = await bundle([
      'agent-image',
      'export',
      s.bundle,
      '--key',
      ed.key,
      '-o',
      path.join(work, 'x'),
    ]);
    t.equal(wrong.code, 1);
    t.match(
      wrong.stderr,
      /^bundle: UNTRUSTED_KEY: .* is not signed by this key \(sha256:[0-9a-f]{64}\): export its agent image with the key that signed it\n$/,
    );
    await t.rejects(stat(path.join(work, 'x')), 'nothing written');
    const layout = path.join(work, 'plain-layout');
    await writeImageLayout(layout, {
      tag: 'app',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ a: 'app' }] }],
    });
    const plain = path.join(work, 'plain.bundle');
    const c = await bundle([
      'create',
      '--quiet',
      '--key',
      ecdsa.key,
      '--version',
      '1.0.0',
      '--cache',
      path.join(work, 'cache'),
      '--image',
      `oci:${layout}:app=registry.example.com/app:v1`,
      '-o',
      plain,
    ]);
    t.equal(c.code, 0, c.stderr);
    t.strictSame(
      (await readdir(work)).filter((f) => f.endsWith('.oci.tar')),
      [],
      'create without --agent-image writes no sidecar',
    );
    const none = await bundle(['agent-image', 'export', plain, '--key', ecdsa.key]);
    t.equal(none.code, 1);
    t.match(
      none.stderr,
      /^bundle: NOT_FOUND: .*plain\.bundle carries no agent image: build it with bundle create --agent-image SOURCE\n$/,
    );
  },
);

t.test('agent-image export --help teaches the node side', async (t) => {
  const r = await bundle(['agent-image', 'export', '--help']);
  t.equal(r.code, 0);
  t.match(r.stdout, /openssl dgst -sha256 -verify/);
  t.match(r.stdout, /skopeo copy oci-archive:/);
});
