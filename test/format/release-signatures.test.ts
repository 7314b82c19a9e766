// tier: unit
// bundle.json release.signatures (docs/FORMAT.md, "Release signatures"): each names a listed blob
// of the release signature media type; readReleaseSignatures returns their bytes only once the
// bundle is trusted and each blob matches its signed digest.
import t from 'tap';
import {
  RELEASE_SIGNATURE_MEDIA_TYPE,
  loadTrust,
  readReleaseSignatures,
  validateManifest,
  verifyBundle,
  withBundleFile,
} from '@offline-bundle/format';
import { tmpdir } from '../status/lib.js';
import { makeBundle } from '../cluster/lib.js';
import { generateKeyPair } from '@offline-bundle/format';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';

const d = (c: string) => 'sha256:' + c.repeat(64);
function manifest(
  signatures: unknown,
  blobs = [{ digest: d('a'), size: 3, mediaType: RELEASE_SIGNATURE_MEDIA_TYPE }],
) {
  return {
    schemaVersion: 2,
    mediaType: 'application/vnd.offline-bundle.v2+json',
    release: {
      name: '4.15.1',
      version: '4.15.1',
      arch: 'amd64',
      image: 'quay.io/x/r:4.15.1',
      digest: d('b'),
      upgradeFrom: [],
      signatures,
    },
    images: [],
    blobs,
    index: { digest: d('c'), size: 10 },
    totals: { layoutBytes: 0, imageStoreBytes: 0 },
    creator: { tool: 't', version: '1', createdAt: 'now' },
    signer: { algorithm: 'ed25519', fingerprint: d('d') },
  };
}

t.test('validateManifest', async (t) => {
  t.ok(
    validateManifest(manifest([{ digest: d('a'), keyIds: ['0123456789abcdef'] }])),
    'a listed signature blob',
  );
  t.ok(
    validateManifest({
      ...manifest(undefined),
      release: { ...manifest(undefined).release, signatures: undefined },
    }),
    'absent: older bundles',
  );
  const bad: [string, unknown, unknown?][] = [
    ['not a list', 'x'],
    ['an unlisted digest', [{ digest: d('e'), keyIds: [] }]],
    [
      'a blob of another media type',
      [{ digest: d('a'), keyIds: [] }],
      [{ digest: d('a'), size: 3, mediaType: 'application/octet-stream' }],
    ],
    [
      'twice',
      [
        { digest: d('a'), keyIds: [] },
        { digest: d('a'), keyIds: [] },
      ],
    ],
    ['a bad key id', [{ digest: d('a'), keyIds: ['XYZ'] }]],
  ];
  for (const [name, sigs, blobs] of bad) {
    t.throws(
      () => validateManifest(manifest(sigs, blobs as never)),
      { code: 'INVALID_MANIFEST' },
      name,
    );
  }
});

t.test('readReleaseSignatures: trusted bundle, digested blobs, verify accepts them', async (t) => {
  const dir = await tmpdir(t);
  const sigs = [Buffer.from('signature one'), Buffer.from('signature two')];
  const b = await makeBundle(dir, { version: '4.15.1', upgradeFrom: [], sign: async () => sigs });
  const r = await withBundleFile(b.file, async (s) =>
    readReleaseSignatures(s, await loadTrust([b.pub])),
  );
  t.same(
    r.signatures.map((s) => s.bytes),
    sigs,
    'in order, byte for byte',
  );
  const byDigest = await withBundleFile(b.file, async (s) =>
    readReleaseSignatures(s, await loadTrust([], b.fileDigest)),
  );
  t.equal(byDigest.signatures.length, 2, 'digest-only trust');
  await t.rejects(
    withBundleFile(b.file, async (s) => readReleaseSignatures(s, await loadTrust([], d('9')))),
    { code: 'FILE_DIGEST_MISMATCH' },
  );
  const other = path.join(dir, 'other.pub');
  await writeFile(other, generateKeyPair('ed25519').publicPem);
  await t.rejects(
    withBundleFile(b.file, async (s) => readReleaseSignatures(s, await loadTrust([other]))),
    { code: 'UNTRUSTED_KEY' },
  );
  await t.rejects(
    withBundleFile(b.file, (s) => readReleaseSignatures(s, {})),
    { code: 'NO_TRUST' },
  );
  const v = await withBundleFile(b.file, async (s) =>
    verifyBundle(s, { trust: await loadTrust([b.pub]) }),
  );
  t.equal(
    v.manifest.release.signatures?.length,
    2,
    'the full verifier accepts the signature entries',
  );
});
