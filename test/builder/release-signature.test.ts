// Release signatures in the bundle: `bundle create --release … --release-signature FILE` or
// `--signature-store URL` (file:// and http://), checked against `--release-keyring` (openpgp.js),
// carried as blobs listed and digested in the signed bundle.json, accepted by `bundle verify`,
// shown by `bundle inspect`. Against a real docker-registry holding an OpenShift-shaped release.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { blobEntry, bundle, bundleJson, errorCode, keygen, tarEntry } from './lib.js';
import { releaseKey, signRelease, writeSignatureStore } from './release-signing.js';

const RELEASE_SIGNATURE_MEDIA_TYPE = 'application/vnd.offline-bundle.release-signature.v1+pgp';

const reg = await startRegistry();
t.teardown(() => reg.stop());
const work = await tmpdir(t, 'ob-relsig-');
const keys = await keygen(work);
const H = reg.host;
const comp = await pushImage(
  {
    tag: 'cvo',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/cvo': 'cvo' }] }],
  },
  `${H}/ocp/art-dev:cvo`,
);
const rel = await pushImage(
  {
    tag: '4.15.1',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [
          releaseFiles({
            version: '4.15.1',
            previous: ['4.15.0'],
            images: { 'cluster-version-operator': comp.digestRef },
            manifests: {
              '0000_50_catalog.yaml': `kind: Deployment\napiVersion: apps/v1\nmetadata: { namespace: openshift-marketplace, name: catalog }\nspec: { template: { spec: { containers: [ { name: c, image: "${comp.digestRef}", imagePullPolicy: Always } ] } } }\n`,
            },
          }),
        ],
      },
    ],
  },
  `${H}/ocp/release:4.15.1`,
);

const good = await releaseKey();
const other = await releaseKey('Someone Else');
const keyring = path.join(work, 'release.asc');
await writeFile(keyring, good.armored);
const sig1 = await signRelease(good, rel.ref, rel.digest);
const sig2 = await signRelease(good, `${H}/ocp/release@${rel.digest}`, rel.digest);
const sigFile = path.join(work, 'signature-1');
await writeFile(sigFile, sig1);
const cache = path.join(work, 'cache');

let n = 0;
async function create(args: string[]) {
  const output = path.join(work, `run-${++n}`, 'r.bundle');
  await mkdir(path.dirname(output), { recursive: true });
  const r = await bundle([
    'create',
    '--quiet',
    '--tls-verify=false',
    '--key',
    keys.key,
    '--cache',
    cache,
    '-o',
    output,
    '--release',
    rel.ref,
    ...args,
  ]);
  return { ...r, output };
}

t.test(
  '--release-signature FILE verified with --release-keyring: create → verify → inspect',
  async (t) => {
    const r = await create(['--release-signature', sigFile, '--release-keyring', keyring]);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stderr,
      /^warning: PullAlways: openshift-marketplace\/Deployment\/catalog: release-manifests\/0000_50_catalog\.yaml: pulls .* imagePullPolicy: Always/m,
      "the payload's Always workloads are named at build time, even with --quiet",
    );
    const m = (await bundleJson(r.output)) as Awaited<ReturnType<typeof bundleJson>> & {
      release: { signatures?: { digest: string; keyIds: string[] }[] };
    };
    t.equal(m.release.signatures?.length, 1, 'one signature listed in the signed bundle.json');
    const s = m.release.signatures![0]!;
    t.same(s.keyIds, [good.keyId], 'the issuer key id');
    t.match(
      m.blobs.find((b) => b.digest === s.digest),
      { mediaType: RELEASE_SIGNATURE_MEDIA_TYPE, size: sig1.length },
      'listed as a blob with its digest and size',
    );
    t.same(
      await tarEntry(r.output, blobEntry(s.digest)),
      sig1,
      'the entry holds the signature file byte for byte',
    );
    const v = await bundle(['verify', r.output, '--key', keys.pub, '--json']);
    t.equal(v.code, 0, `bundle verify accepts it like any listed entry: ${v.stderr}`);
    const i = await bundle(['inspect', r.output, '--json']);
    t.equal(i.code, 0, i.stderr);
    const ij = JSON.parse(i.stdout);
    t.same(ij.releaseSignatures, [
      { configMapKey: `sha256-${rel.digest.slice(7)}-1`, digest: s.digest, keyIds: [good.keyId] },
    ]);
    const text = await bundle(['inspect', r.output]);
    t.match(text.stdout, new RegExp(`release signatures: signature-1 by key ${good.keyId}`));
  },
);

t.test(
  '--signature-store file:// takes signature-1, signature-2, … until one is missing',
  async (t) => {
    const store = await writeSignatureStore(path.join(work, 'store'), rel.digest, [sig1, sig2]);
    const r = await create(['--signature-store', store, '--release-keyring', keyring]);
    t.equal(r.code, 0, r.stderr);
    const m = (await bundleJson(r.output)) as unknown as {
      release: { signatures: { digest: string }[] };
    };
    t.equal(m.release.signatures.length, 2);
    t.same(
      await tarEntry(r.output, blobEntry(m.release.signatures[1]!.digest)),
      sig2,
      'in store order',
    );
    const dup = await create(['--signature-store', store, '--release-signature', sigFile]);
    t.equal(dup.code, 0, dup.stderr);
    t.equal(
      ((await bundleJson(dup.output)) as unknown as { release: { signatures: unknown[] } }).release
        .signatures.length,
      2,
      'the same bytes twice are carried once',
    );
  },
);

t.test('--signature-store http://', async (t) => {
  const dir = path.join(work, 'http-store');
  await writeSignatureStore(dir, rel.digest, [sig1]);
  const server = createServer(async (req, res) => {
    try {
      res.end(
        await readFile(
          path.join(
            dir,
            decodeURIComponent(new URL(req.url!, 'http://x').pathname.replace(/^\/sigs\//, '')),
          ),
        ),
      );
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const r = await create([
    '--signature-store',
    `http://127.0.0.1:${(server.address() as AddressInfo).port}/sigs/`,
  ]);
  t.equal(r.code, 0, r.stderr);
  t.equal(
    ((await bundleJson(r.output)) as unknown as { release: { signatures: unknown[] } }).release
      .signatures.length,
    1,
  );
});

t.test('refusals, each with its code', async (t) => {
  const otherKeyring = path.join(work, 'other.asc');
  await writeFile(otherKeyring, other.armored);
  const wrongDigest = path.join(work, 'wrong-digest.sig');
  await writeFile(wrongDigest, await signRelease(good, rel.ref, comp.digest));
  const tampered = path.join(work, 'tampered.sig');
  const bytes = Buffer.from(sig1);
  bytes[bytes.length - 30]! ^= 0x01;
  await writeFile(tampered, bytes);
  const notPgp = path.join(work, 'not-pgp.sig');
  await writeFile(notPgp, 'hello');
  const cases: [string, string[], string][] = [
    [
      'a key not in the keyring',
      ['--release-signature', sigFile, '--release-keyring', otherKeyring],
      'UNTRUSTED_RELEASE_SIGNATURE',
    ],
    [
      'a signature over another digest',
      ['--release-signature', wrongDigest],
      'BAD_RELEASE_SIGNATURE',
    ],
    [
      'altered bytes',
      ['--release-signature', tampered, '--release-keyring', keyring],
      'BAD_RELEASE_SIGNATURE',
    ],
    ['not OpenPGP', ['--release-signature', notPgp], 'BAD_RELEASE_SIGNATURE'],
    [
      'a store without this digest',
      ['--signature-store', `file://${path.join(work, 'empty-store')}`],
      'SIGNATURE_NOT_FOUND',
    ],
    ['a missing file', ['--release-signature', path.join(work, 'nope')], 'SIGNATURE_NOT_FOUND'],
    [
      'an unreadable keyring',
      ['--release-signature', sigFile, '--release-keyring', sigFile],
      'INVALID_KEYRING',
    ],
    ['a keyring without signatures', ['--release-keyring', keyring], 'INVALID_CONFIG'],
  ];
  for (const [name, args, code] of cases) {
    const r = await create(args);
    t.equal(r.code, 1, `${name}: exit 1`);
    t.equal(errorCode(r.stderr), code, `${name}: ${code} (${r.stderr.trim()})`);
  }
  const noRelease = await bundle([
    'create',
    '--quiet',
    '--version',
    '1.0',
    '--image',
    `docker://${comp.ref}`,
    '--release-signature',
    sigFile,
    '--key',
    keys.key,
    '-o',
    path.join(work, 'x.bundle'),
  ]);
  t.equal(errorCode(noRelease.stderr), 'INVALID_CONFIG', 'signatures without --release');
});
