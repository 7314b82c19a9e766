// The agent archive a node keeps for after CRI-O's wipe (issue 38): deploy/openshift/
// bundle-agent-bootstrap.sh run directly (bash, --no-start) against a containers-storage under a
// temp root (vfs) with the real skopeo and openssl, as test/deploy/bootstrap*.test.ts run it. The
// booted node (offline-model-booted.test.ts) shows the same under systemd across a reboot; here
// are the cases a boot would make slow: what is kept, which kept pair is loaded, each refusal,
// and a self-upgrade's newer agent followed (the switch itself written as the agent writes it).
import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { readFile, readdir, rm, stat, writeFile, open } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT_REPOSITORY, keygen, makeNode, makeSidecar, runBootstrap, storeContents, storedDigest, type Node, type Sidecar } from '../deploy/lib.js';

const work = await tmpdir(t, 'ob-kept-');
const key = await keygen(work, 'factory');
const first = await makeSidecar(work, key, { version: '0.9.0', layerBytes: 200_000 });
const newer = await makeSidecar(work, key, { version: '0.9.5', layerBytes: 200_000 });
let nodes = 0;

const KEPT = 'var/lib/bundle-agent/agent-image';
const kept = async (node: Node) => (await readdir(path.join(node.root, KEPT)).catch(() => [] as string[])).sort();
const names = (s: Sidecar) => [path.basename(s.archive), path.basename(s.statement)];

async function plug(node: Node, s: Sidecar): Promise<void> {
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  execFileSync('mkdir', ['-p', dir]);
  execFileSync('cp', [s.bundle, s.archive, s.statement, dir]);
}
const unplug = (node: Node) => rm(path.join(node.media, 'bundle-agent'), { recursive: true, force: true });
/** What crio-wipe does to the store podman shares: the images go. */
const wipe = (node: Node) => { execFileSync('skopeo', ['delete', `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.9.0`], { stdio: 'ignore' }); };
/** --installed as the unit's ExecCondition runs it: trust from nowhere but the node's keys. */
const installed = (node: Node) => runBootstrap(node, ['--installed']);

/** A node with bundle-agent 0.9.0 installed from a stick (then unplugged). */
async function installedNode(t: Test): Promise<Node> {
  const node = await makeNode(path.join(work, `node-${++nodes}`), key);
  await plug(node, first);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  await unplug(node);
  return node;
}

t.test('an install from a stick keeps the checked archive and its statement; after a wipe --installed loads it again', async (t) => {
  const node = await installedNode(t);
  t.strictSame(await kept(node), names(first), `kept in ${KEPT}: the archive and its statement`);
  for (const f of names(first)) {
    t.equal((await readFile(path.join(node.root, KEPT, f))).equals(await readFile(path.join(first.dir, f))), true, `${f}: the very bytes checked`);
    t.equal((await stat(path.join(node.root, KEPT, f))).mode & 0o777, 0o600, `${f}: root's alone`);
  }
  t.equal((await installed(node)).code, 0, 'installed: nothing loaded');
  wipe(node);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}@${first.manifest}`), undefined, 'wiped: the image the unit names is gone');
  const r = await installed(node);
  t.equal(r.code, 0, `--installed loads it again and says installed: ${r.stderr}`);
  t.match(r.stderr, /is not in storage \(after an unclean shutdown.*loading it again from the archive kept in/);
  t.match(r.stderr, /loaded localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} \(bundle-agent 0\.9\.0\) again from .*agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar, signed by .*factory\.pub/);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}@${first.manifest}`), first.manifest, 'in storage again under the digest the unit names');
  t.strictSame(await kept(node), names(first), 'still kept for the next wipe');
});

t.test('a tampered kept archive is refused in one line; storage stays as the wipe left it', async (t) => {
  const node = await installedNode(t);
  const archive = path.join(node.root, KEPT, path.basename(first.archive));
  const fh = await open(archive, 'r+');
  await fh.write(Buffer.from('X'), 0, 1, (await fh.stat()).size - 2048);
  await fh.close();
  wipe(node);
  const r = await installed(node);
  t.equal(r.code, 1, 'not installed: the unit is skipped');
  const refusals = r.stderr.split('\n').filter((l) => /does not hash to the statement's sha256/.test(l));
  t.equal(refusals.length, 1, `one line names the kept archive and the cause: ${refusals[0]}`);
  t.match(refusals[0], /agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar: does not hash/);
  t.strictSame(await storeContents(node), { images: [], layers: [] }, 'no image and no layer in the store');
  t.match(r.console, /The copy of the agent kept on this node was refused/, 'the console says so');
});

t.test('a kept statement altered (its signature no longer verifies): refused, nothing loaded', async (t) => {
  const node = await installedNode(t);
  const statement = path.join(node.root, KEPT, path.basename(first.statement));
  await writeFile(statement, (await readFile(statement, 'utf8')).replace(/^arch amd64$/m, 'arch amd64 '));
  wipe(node);
  const r = await installed(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar\.sig: the signature does not verify with any trusted key/);
  t.strictSame(await storeContents(node), { images: [], layers: [] }, 'nothing loaded');
});

t.test('a kept pair of another agent than the unit names is not loaded', async (t) => {
  const node = await installedNode(t);
  const dropIn = path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d/image.conf');
  await writeFile(dropIn, `[Container]\nImage=${AGENT_REPOSITORY}@${newer.manifest}\n`);
  wipe(node);
  const r = await installed(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /the agent archives kept in .* are not localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} \(the image the unit runs\): none loaded/);
  t.strictSame(await storeContents(node), { images: [], layers: [] }, 'nothing loaded');
});

t.test('a self-upgrade is followed: a stick with a newer agent leaves it kept; once the unit runs it, the older pair goes; a wipe loads the newer', async (t) => {
  const node = await installedNode(t);
  await plug(node, newer);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /is installed: nothing to do/);
  t.match(r.stderr, /kept bundle-agent-0\.9\.5-amd64\.oci\.tar \(bundle-agent 0\.9\.5/);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.5`), undefined, 'not loaded: the agent switches itself');
  t.strictSame(await kept(node), [...names(first), ...names(newer)].sort(), 'both kept: the one the unit runs, the newest');
  const again = await runBootstrap(node);
  t.notMatch(again.stderr, /kept bundle-agent/, 'kept once, not copied again');
  await unplug(node);
  // the switch as the agent makes it: the image pulled through CRI-O into the shared store, its drop-in
  execFileSync('skopeo', ['copy', '--quiet', `oci-archive:${newer.archive}`, `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.9.5`]);
  await writeFile(path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d/image.conf'), `# Written by bundle-agent: the agent image a bundle brought.\n[Container]\nImage=${AGENT_REPOSITORY}@${newer.manifest}\n`);
  const boot = await runBootstrap(node);
  t.equal(boot.code, 0, boot.stderr);
  t.strictSame(await kept(node), names(newer), `the next run keeps only the pair the unit runs: ${boot.stderr.split('\n').filter((l) => /removed/.test(l)).join('; ')}`);
  execFileSync('skopeo', ['delete', `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.9.5`], { stdio: 'ignore' });
  wipe(node);
  const w = await installed(node);
  t.equal(w.code, 0, w.stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}@${newer.manifest}`), newer.manifest, 'the agent the unit runs is back');
});

t.test('an older agent on a stick is not kept; leftovers of a stopped run are pruned', async (t) => {
  const node = await makeNode(path.join(work, `node-${++nodes}`), key);
  await plug(node, newer);
  t.equal((await runBootstrap(node)).code, 0);
  await unplug(node);
  await writeFile(path.join(node.root, KEPT, '.bundle-agent-0.9.5-amd64.oci.tar.Ab12Cd'), 'half');
  await plug(node, first);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.strictSame(await kept(node), names(newer), 'only the pair the unit runs');
});

t.test('an archive over MAX_KEPT_ARCHIVE_BYTES (1 GiB) is not kept: one line says so, the kept pair stays', async (t) => {
  const node = await installedNode(t);
  // a signed statement of a 1 GiB + 1 byte archive (sparse: no disk, its sha256 true), re-signed with the factory key
  const dir = path.join(work, 'big');
  execFileSync('mkdir', ['-p', dir]);
  const archive = path.join(dir, path.basename(newer.archive));
  execFileSync('truncate', ['-s', String(2 ** 30 + 1), archive]);
  const sha = execFileSync('sha256sum', [archive], { encoding: 'utf8' }).split(' ')[0]!;
  const signed = (await readFile(newer.statement, 'utf8')).split('\n').filter((l) => l && !l.startsWith('signature '))
    .map((l) => l.replace(/^size \d+$/, `size ${2 ** 30 + 1}`).replace(/^sha256 [0-9a-f]+$/, `sha256 ${sha}`)).join('\n') + '\n';
  await writeFile(path.join(dir, 'signed'), signed);
  const sig = execFileSync('openssl', ['dgst', '-sha256', '-sign', key.key, path.join(dir, 'signed')]).toString('base64');
  await writeFile(`${archive}.sig`, `${signed}signature ${sig}\n`);
  const stick = path.join(node.media, 'bundle-agent', 'sdb1');
  execFileSync('mkdir', ['-p', stick]);
  execFileSync('cp', ['--sparse=always', archive, `${archive}.sig`, stick]);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /not keeping bundle-agent-0\.9\.5-amd64\.oci\.tar: 1073741825 bytes, over the 1073741824 a kept agent archive may have/);
  t.strictSame(await kept(node), names(first), 'only the pair the unit runs is kept');
});
