// `bundle cluster approve|approvals|revoke` against the RBAC-enforcing API stand-in (the shipped
// deploy/rbac.yaml and admin-rbac.yaml, the BundleApproval CRD's schema and CEL rules of
// deploy/crd.yaml): the admin is bound only as admin-rbac.yaml's header says; the node identity
// is the kubelet's (system:node:NAME, group system:nodes) and may read approvals, never make one.
import t from 'tap';
import { createHash, createPublicKey } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { BUNDLE_JSON, generateKeyPair } from '@offline-bundle/format';
import { type ApprovalSpec } from '@offline-bundle/status';
import { adminApis } from '@offline-bundle/kube';
import { approveBundle, listApprovals, revokeApproval } from '@offline-bundle/cluster';
import { ApiPeerDirectory } from '@offline-bundle/agent';
import { bundle, errorCode, tarEntry } from '../builder/lib.js';
import { craft, entryNamed, readEntries, withData } from '../format/craft.js';
import { ADMIN, clusterFixture } from './lib.js';

// Every `bundle` run is a process (seconds on a loaded machine): the CLI's own behaviour is run
// through it, the rest in-process through the same library calls.
const { work, api, b, cluster, kubeconfig } = await clusterFixture(t);
const admin = () => adminApis(kubeconfig);
/** An in-process call's ClusterError code (or 'ok'). */
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: { code?: string }) => e.code ?? String(e),
  );
const sha = (bytes: Uint8Array) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
/** The digest an approval of b must name: sha256 of bundle.json as zstd and tar read it from the file. */
const manifestDigest = sha(await tarEntry(b.file, 'bundle.json'));
/** The key's fingerprint as the factory's tools define it: sha256 of its SubjectPublicKeyInfo. */
const signer = sha(
  createPublicKey(await readFile(b.pub, 'utf8')).export({ type: 'spki', format: 'der' }),
);
const nameOf = (digest: string) => `sha256-${digest.slice(7)}`;
const creates = () =>
  api.requests.filter((r) => r.resource === 'bundleapprovals' && r.verb === 'create');
const json = (s: string) => JSON.parse(s) as Record<string, any>;

t.beforeEach(() => {
  api.approvals = [];
});

t.test(
  "approve (stand-in, RBAC per identity): the signature checked with the real key; the approval names the signed bundle.json's digest",
  async (t) => {
    const before = creates().length;
    const r = await cluster(['approve', b.file, '--key', b.pub]);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stdout,
      new RegExp(
        `^approved ${manifestDigest} \\(4\\.15\\.1, 4\\.15\\.1\\), signer ${signer}\\nsignature checked with ${b.pub.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`,
      ),
    );
    const obj = api.get('bundleapprovals', nameOf(manifestDigest));
    t.match(
      obj,
      {
        kind: 'BundleApproval',
        spec: { manifestDigest, version: '4.15.1', releaseName: '4.15.1', signer, checked: 'file' },
      },
      'one object, named after the digest',
    );
    t.equal(api.approvals.length, 1);
    const made = creates().slice(before);
    t.same(
      made.map((x) => [x.user, x.status]),
      [[ADMIN, 201]],
      'created by the admin, bound only as admin-rbac.yaml says',
    );

    const again = json((await cluster(['approve', b.file, '--key', b.pub, '--json'])).stdout);
    t.equal(again.created, false, 'approving again keeps the one approval');
    t.equal(again.approval.manifestDigest, manifestDigest);
    t.equal(api.approvals.length, 1);
  },
);

t.test(
  'approve (stand-in): a key that did not sign the bundle is refused, nothing approved',
  async (t) => {
    const other = path.join(work, 'other.pub');
    await writeFile(other, generateKeyPair('ed25519').publicPem);
    const before = creates().length;
    const r = await cluster(['approve', b.file, '--key', other]);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'UNTRUSTED_KEY', r.stderr);
    t.match(r.stderr, /not among the trusted keys/);
    t.equal(creates().length, before, 'no call to create');
    t.same(api.approvals, []);
  },
);

t.test(
  'approve (stand-in): a bundle whose bundle.json was changed after signing is refused, nothing approved',
  async (t) => {
    const entries = await readEntries(b.file);
    const m = entryNamed(entries, BUNDLE_JSON);
    const changed = JSON.parse(m.data.toString());
    changed.release.version = '4.15.2';
    const tampered = path.join(work, 'tampered.bundle');
    await craft(
      tampered,
      entries.map((e) =>
        e === m ? withData(e, Buffer.from(JSON.stringify(changed, null, 2) + '\n')) : e,
      ),
    );
    const before = creates().length;
    const r = await cluster(['approve', tampered, '--key', b.pub]);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'BAD_SIGNATURE', r.stderr);
    t.equal(creates().length, before);
    t.same(api.approvals, []);
  },
);

t.test(
  'approve by digest (stand-in): needs --version and exactly one --key; recorded as checked by digest; never edited',
  async (t) => {
    const digest = `sha256:${'5e'.repeat(32)}`;
    const bare = await cluster(['approve', digest, '--key', b.pub]);
    t.same([bare.code, errorCode(bare.stderr)], [1, 'APPROVAL_NEEDS_VERSION']);
    t.match(bare.stderr, /give the bundle file, whose signature is then checked here/);
    t.same(api.approvals, []);
    const r = await cluster(['approve', digest, '--version', '4.15.1', '--key', b.pub]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /signature not checked here \(no bundle file given\): every node checks it/);
    t.match(api.get('bundleapprovals', nameOf(digest)), {
      spec: { manifestDigest: digest, version: '4.15.1', signer, checked: 'digest' },
    });
    // the same digest with another version: approvals are not edited
    const other: ApprovalSpec = {
      manifestDigest: digest,
      version: '4.15.9',
      signer,
      checked: 'digest',
    };
    t.equal(await codeOf(approveBundle(await admin(), other)), 'ALREADY_APPROVED');
    t.match(
      api.get('bundleapprovals', nameOf(digest)),
      { spec: { version: '4.15.1' } },
      'unchanged',
    );
    t.equal(
      await codeOf(approveBundle(await admin(), { ...other, manifestDigest: 'sha256:xyz' })),
      'INVALID_DIGEST',
    );
  },
);

t.test(
  'approvals and revoke (stand-in): list oldest first, delete by digest, a second revoke says there is none',
  async (t) => {
    t.same(await listApprovals(await admin()), []);
    const spec: ApprovalSpec = {
      manifestDigest,
      version: '4.15.1',
      releaseName: '4.15.1',
      signer,
      checked: 'file',
    };
    t.equal((await approveBundle(await admin(), spec)).created, true);
    const older: ApprovalSpec = {
      manifestDigest: `sha256:${'0a'.repeat(32)}`,
      version: '4.15.0',
      signer,
      checked: 'digest',
    };
    api.put('bundleapprovals', {
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'BundleApproval',
      metadata: { name: nameOf(older.manifestDigest), creationTimestamp: '2026-01-01T00:00:00Z' },
      spec: older,
    });
    const listed = await cluster(['approvals']);
    t.equal(listed.code, 0, listed.stderr);
    t.match(listed.stdout, /^DIGEST\s+VERSION\s+RELEASE\s+SIGNER\s+CHECKED\s+APPROVED\n/);
    t.match(listed.stdout, `${manifestDigest}  4.15.1`);
    t.same(
      (await listApprovals(await admin())).map((a) => [
        a.manifestDigest,
        a.version,
        a.signer,
        a.checked,
      ]),
      [
        [older.manifestDigest, '4.15.0', signer, 'digest'],
        [manifestDigest, '4.15.1', signer, 'file'],
      ],
      'oldest first',
    );
    const r = await cluster(['revoke', manifestDigest]);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, `revoked ${manifestDigest}`);
    t.same(
      api.approvals.map((a) => a.spec.manifestDigest),
      [older.manifestDigest],
      'that one deleted',
    );
    t.equal(await codeOf(revokeApproval(await admin(), manifestDigest)), 'NOT_APPROVED');
  },
);

t.test(
  'the CRD (stand-in, deploy/crd.yaml schema and CEL): an approval named after another digest, or with a bad digest, is refused',
  async (t) => {
    const { request } = await import('node:https');
    const ca = await readFile(api.caFile);
    const post = (body: unknown) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const req = request(
          new URL('/apis/bundles.offline-bundle.io/v1alpha1/bundleapprovals', api.url),
          {
            method: 'POST',
            ca,
            headers: { Authorization: 'Bearer admin-token', 'Content-Type': 'application/json' },
          },
          (res) => {
            let s = '';
            res.on('data', (d) => {
              s += d;
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(s) }));
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify(body));
      });
    const spec = { manifestDigest, version: '4.15.1', signer, checked: 'file' };
    const doc = (name: string, s: Record<string, unknown>) => ({
      apiVersion: 'bundles.offline-bundle.io/v1alpha1',
      kind: 'BundleApproval',
      metadata: { name },
      spec: s,
    });
    const wrongName = await post(doc(nameOf(`sha256:${'0'.repeat(64)}`), spec));
    t.same([wrongName.status, wrongName.body.reason], [422, 'Invalid']);
    t.match(wrongName.body.message, /metadata\.name must be sha256-<hex> of spec\.manifestDigest/);
    const badDigest = await post(doc('sha256-abc', { ...spec, manifestDigest: 'sha256:abc' }));
    t.equal(badDigest.status, 422);
    t.match(badDigest.body.message, /manifestDigest: must match pattern/);
    const noSigner = await post(
      doc(nameOf(manifestDigest), { manifestDigest, version: '4.15.1', checked: 'file' }),
    );
    t.equal(noSigner.status, 422);
    t.same(api.approvals, [], 'none stored');
    t.equal(
      (await post(doc(nameOf(manifestDigest), spec))).status,
      201,
      'the valid one is created',
    );
    t.equal((await post(doc(nameOf(manifestDigest), spec))).status, 409, 'and only once');
  },
);

t.test(
  'the node identity (stand-in, shipped rbac.yaml): refused creating or deleting an approval, allowed listing them',
  async (t) => {
    const kc = await api.certKubeconfig(
      path.join(work, 'node-kubeconfig'),
      'system:node:worker-0',
      ['system:nodes'],
    );
    const r = await bundle(['cluster', 'approve', b.file, '--key', b.pub, '--kubeconfig', kc]);
    t.same([r.code, errorCode(r.stderr)], [1, 'FORBIDDEN'], r.stderr);
    t.match(
      r.stderr,
      'User "system:node:worker-0" cannot create resource "bundleapprovals" in API group "bundles.offline-bundle.io" at the cluster scope',
    );
    t.same(api.approvals, [], 'nothing approved');
    const spec: ApprovalSpec = { manifestDigest, version: '4.15.1', signer, checked: 'file' };
    await approveBundle(await admin(), spec);
    const node = await adminApis(kc);
    t.same(
      await new ApiPeerDirectory({ node: 'worker-0', kubeconfig: kc }).approved(),
      [{ manifestDigest, version: '4.15.1', signer }],
      "the node's directory lists it",
    );
    const listed = api.requests
      .filter((x) => x.resource === 'bundleapprovals' && x.verb === 'list')
      .at(-1)!;
    t.same([listed.user, listed.status], ['system:node:worker-0', 200]);
    t.equal(await codeOf(revokeApproval(node, manifestDigest)), 'FORBIDDEN');
    t.match(api.requests.at(-1), { verb: 'delete', user: 'system:node:worker-0', status: 403 });
    t.equal(api.approvals.length, 1, 'still approved');
    // the per-node ServiceAccount (the other identity rbac.yaml binds): the same
    const saKc = await api.certKubeconfig(
      path.join(work, 'sa-kubeconfig'),
      'system:serviceaccount:offline-bundle:bundle-agent-worker-0',
      ['system:serviceaccounts', 'system:serviceaccounts:offline-bundle'],
    );
    const sa = await adminApis(saKc);
    t.equal(
      await codeOf(approveBundle(sa, { ...spec, manifestDigest: `sha256:${'1b'.repeat(32)}` })),
      'FORBIDDEN',
    );
    t.equal(await codeOf(revokeApproval(sa, manifestDigest)), 'FORBIDDEN');
    t.equal((await listApprovals(sa)).length, 1, 'the ServiceAccount lists them');
    // a user bound to nothing of ours reads nothing
    const nobody = await api.tokenKubeconfig(path.join(work, 'nobody'), api.addToken('bob'));
    t.equal(await codeOf(listApprovals(await adminApis(nobody))), 'FORBIDDEN');
    t.equal(api.approvals.length, 1);
  },
);
