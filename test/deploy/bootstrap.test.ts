// deploy/openshift/bundle-agent-bootstrap.sh, run directly (bash) as a node with no agent and no
// registry would run it: the sidecar `bundle create --agent-image` wrote, on "sticks" (directories,
// a loop-mounted ext4 image for the pulled stick), checked with the real openssl, loaded with the
// real skopeo into a containers-storage under a temp root (vfs), disk full on real tmpfs mounts.
// Without systemd (--no-start): the booted-node test runs the same script under systemd.
import t, { type Test } from 'tap';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { appendFile, chmod, copyFile, mkdir, readFile, readdir, rm, symlink, truncate, writeFile, open } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { startContainerd } from '../helpers/containerd.mjs';
import {
  AGENT_REPOSITORY, BOOTSTRAP, keygen, makeNode, makeSidecar, runBootstrap, storeContents, storedDigest, workLeftovers, writeKey, type Node, type Sidecar,
} from './lib.js';

const work = await tmpdir(t, 'ob-bootstrap-');
const ecdsa = await keygen(work, 'factory');
const ed25519 = await keygen(work, 'edfactory', 'ed25519');
const other = await keygen(work, 'other');
// 3 MB of random bytes: the copy and the store take that much room (the disk-full tests)
const good = await makeSidecar(work, ecdsa, { version: '0.9.0', layerBytes: 3_000_000 });
const edSigned = await makeSidecar(work, ed25519, { version: '0.9.1' });
const arm = await makeSidecar(work, ecdsa, { version: '0.9.0', arch: 'arm64' });
const older = await makeSidecar(work, ecdsa, { version: '0.8.0' });
const release = await makeSidecar(work, ecdsa, { version: '1.0.0' });
const candidate = await makeSidecar(work, ecdsa, { version: '1.0.0-rc.1' });
// the version the unit's own default Image= is tagged with (generate.mjs: …:0.1.0)
const first = await makeSidecar(work, ecdsa, { version: '0.1.0' });
const otherSigned = await makeSidecar(work, other, { version: '0.9.2' });
let n = 0;
const nodeDir = async () => {
  const d = path.join(work, `node-${++n}`);
  await mkdir(d);
  return d;
};

/** A stick at MEDIA/bundle-agent/NAME with the bundle and (unless told) the sidecar's two files. */
async function plug(node: Node, s: Sidecar, opts: { name?: string; sidecar?: boolean } = {}): Promise<string> {
  const dir = path.join(node.media, 'bundle-agent', opts.name ?? 'sdb1');
  await mkdir(dir, { recursive: true });
  await copyFile(s.bundle, path.join(dir, path.basename(s.bundle)));
  if (opts.sidecar !== false) {
    await copyFile(s.statement, path.join(dir, path.basename(s.statement)));
    await copyFile(s.archive, path.join(dir, path.basename(s.archive)));
  }
  return dir;
}
const unplug = (node: Node) => rm(path.join(node.media, 'bundle-agent'), { recursive: true, force: true });

async function nothingLoaded(t: Test, node: Node, r: { dropIn: string | undefined }) {
  t.equal(r.dropIn, undefined, 'no drop-in');
  t.strictSame(await storeContents(node), { images: [], layers: [] }, 'no image and no layer in the store');
  t.strictSame(await workLeftovers(node), [], 'no copy left in the work directory');
}

async function loadsGood(t: Test, node: Node, s: Sidecar = good) {
  await unplug(node);
  await plug(node, s);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, `the next good stick loads: ${r.stderr}`);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:${s.version}`), s.manifest, 'the agent image is in the store');
  t.match(r.dropIn ?? '', new RegExp(`^Image=${AGENT_REPOSITORY}@${s.manifest}$`, 'm'));
}

const ISSUE = (line: string) => `Update: ${line}\n\n`;

t.test('a stick with the agent image: verified, loaded by digest, the Quadlet drop-in names the digest; a second run does nothing', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), good.manifest, 'skopeo kept the manifest digest the statement signs');
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}@${good.manifest}`), good.manifest, 'and the image is found by that digest, as Quadlet will ask');
  const dropIn = r.dropIn ?? '';
  t.match(dropIn, /^\[Container\]$/m);
  t.strictSame(dropIn.split('\n').filter((l) => l && !l.startsWith('#')), ['[Container]', `Image=${AGENT_REPOSITORY}@${good.manifest}`], 'only Image=, by digest');
  t.equal(r.console, ISSUE('The agent (bundle-agent 0.9.0) was loaded from the USB stick and is starting'));
  t.match(r.stderr, /loading localhost\/offline-bundle\/bundle-agent:0\.9\.0 \(sha256:[0-9a-f]{64}\) from .*signed by .*factory\.pub/);
  t.strictSame(await workLeftovers(node), [], 'the copy is removed');
  const again = await runBootstrap(node);
  t.equal(again.code, 0);
  t.match(again.stderr, /is installed: nothing to do/);
  t.notMatch(again.stderr, /loading/, 'not loaded twice');
});

t.test('an Ed25519 key: checked with openssl pkeyutl -rawin, loaded', async (t) => {
  const node = await makeNode(await nodeDir(), ed25519);
  await writeKey(node, other, 'unrelated.pub');
  await plug(node, edSigned);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.1`), edSigned.manifest);
});

t.test('signed by a key the node does not trust: nothing loaded, one console line; then a good stick works', async (t) => {
  const node = await makeNode(await nodeDir(), other);
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The agent image on the USB stick is not signed by this cluster\'s key: nothing was loaded'));
  t.match(r.stderr, /the signature does not verify with any trusted key \(.*factory\.pub, from .*keys\/\*\.pub\): wrong key, or altered/);
  t.notMatch(r.stderr, /signed by/, 'no signer named from the unverified statement');
  t.equal(r.stderr.trim().split('\n').length, 1, 'one journal line');
  await nothingLoaded(t, node, r);
  await writeKey(node, ecdsa);
  await loadsGood(t, node);
});

t.test('a statement altered after signing (another arch written in): refused as unsigned', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, arm);
  const f = path.join(dir, path.basename(arm.statement));
  await writeFile(f, (await readFile(f, 'utf8')).replace(/^arch arm64$/m, 'arch amd64'));
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.console ?? '', /not signed by this cluster's key/);
  await nothingLoaded(t, node, r);
});

t.test('a truncated archive (a copy cut short): refused before loading; then a good stick works', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, good);
  await truncate(path.join(dir, path.basename(good.archive)), 1_000_000);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The agent image on the USB stick is incomplete (a copy cut short?): copy it again'));
  t.match(r.stderr, /1000000 bytes, the statement says \d+: an incomplete copy/);
  await nothingLoaded(t, node, r);
  await loadsGood(t, node);
});

t.test('an archive of the right size with one byte changed: the sha256 of the copy refuses it', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, good);
  const fh = await open(path.join(dir, path.basename(good.archive)), 'r+');
  await fh.write(Buffer.from('X'), 0, 1, 2_000_000);
  await fh.close();
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /does not hash to the statement's sha256/);
  t.equal(r.console, ISSUE('The agent image on the USB stick is damaged: copy it from the factory again'));
  await nothingLoaded(t, node, r);
});

t.test('an agent image for another architecture: refused, the console names both', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, arm);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The agent image on the USB stick is for arm64, this node is amd64: bring the amd64 one'));
  await nothingLoaded(t, node, r);
  await loadsGood(t, node);
});

t.test('a stick with a bundle and no agent image: a console line; no stick at all: nothing, quietly', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const none = await runBootstrap(node);
  t.equal(none.code, 0);
  t.equal(none.console, undefined, 'no console line without a stick');
  t.match(none.stderr, /no stick with an agent image under .*: nothing to do/);
  await plug(node, good, { sidecar: false });
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The USB stick has no agent image, and this node has no agent yet: bring a stick made with --agent-image'));
  await nothingLoaded(t, node, r);
  await loadsGood(t, node);
});

t.test('the statement without its archive, and an archive that is a symlink: refused, nothing followed', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, good);
  const archive = path.join(dir, path.basename(good.archive));
  await rm(archive);
  const missing = await runBootstrap(node);
  t.equal(missing.code, 1);
  t.match(missing.console ?? '', /has the agent image's statement but not the image/);
  await symlink(good.archive, archive);
  const linked = await runBootstrap(node);
  t.equal(linked.code, 1);
  t.match(linked.stderr, /missing \(or not a regular file\) beside its statement/);
  await nothingLoaded(t, node, linked);
});

t.test('the drop-in directory a symlink to elsewhere: not written through', async (t) => {
  const d = await nodeDir();
  const node = await makeNode(d, ecdsa);
  const elsewhere = path.join(d, 'elsewhere');
  await mkdir(elsewhere);
  await mkdir(path.join(node.root, 'etc/containers/systemd'), { recursive: true });
  await symlink(elsewhere, path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d'));
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /is not a directory \(or is a symlink\): cannot write image\.conf/);
  t.strictSame(spawnSync('ls', ['-A', elsewhere], { encoding: 'utf8' }).stdout, '', 'nothing written where the symlink points');
});

t.test('disk full: the image store on a 2 MiB tmpfs; nothing half-loaded; then a store with room works', { skip: process.getuid?.() !== 0 && 'needs root (mount)' }, async (t) => {
  const d = await nodeDir();
  const small = path.join(d, 'small');
  await mkdir(small);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', small]);
  t.teardown(() => { execFileSync('umount', [small]); });
  const node = await makeNode(d, ecdsa, { storeRoot: small });
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The node\'s disk is full: the agent image was not loaded'));
  t.match(r.stderr, /the image store is full: .*no space left on device/);
  await nothingLoaded(t, node, r);
  const roomy = { ...node, storage: `vfs@${d}/big/root+${d}/big/run` };
  const ok = await runBootstrap(roomy);
  t.equal(ok.code, 0, ok.stderr);
  t.equal(await storedDigest(roomy, `${AGENT_REPOSITORY}:0.9.0`), good.manifest);
});

t.test('disk full: no room for the copy off the stick (1 MiB work directory)', { skip: process.getuid?.() !== 0 && 'needs root (mount)' }, async (t) => {
  const d = await nodeDir();
  const small = path.join(d, 'work');
  await mkdir(small);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]);
  t.teardown(() => { execFileSync('umount', [small]); });
  const node = await makeNode(d, ecdsa, { work: small });
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The node\'s disk is full: the agent image was not loaded'));
  t.match(r.stderr, /bytes free, \d+ needed for the agent image/);
  await nothingLoaded(t, node, r);
});

t.test('stick pulled mid-load: the stick (ext4 on a loop device) loses its second half while the archive is read', { skip: process.getuid?.() !== 0 && 'needs root (losetup, mount)' }, async (t) => {
  const d = await nodeDir();
  const node = await makeNode(d, ecdsa);
  const img = path.join(d, 'stick.img');
  await writeFile(img, '');
  await truncate(img, 32 * 1024 * 1024);
  execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', '-L', 'STICK', img]);
  const dev = execFileSync('losetup', ['--find', '--show', img], { encoding: 'utf8' }).trim();
  const mnt = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(mnt, { recursive: true });
  let mounted = false;
  t.teardown(() => {
    if (mounted) spawnSync('umount', [mnt]);
    spawnSync('losetup', ['-d', dev]);
  });
  execFileSync('mount', [dev, mnt]);
  mounted = true;
  // the statement first: its blocks come before the archive's
  await copyFile(good.statement, path.join(mnt, path.basename(good.statement)));
  await copyFile(good.archive, path.join(mnt, path.basename(good.archive)));
  execFileSync('umount', [mnt]);
  // mounted afresh: nothing of the files is in the page cache, every read goes to the device
  execFileSync('mount', ['-o', 'ro', dev, mnt]);
  const extents = (file: string) => execFileSync('filefrag', ['-v', '-b4096', path.join(mnt, file)], { encoding: 'utf8' })
    .split('\n').map((l) => /^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):/.exec(l)).filter((m) => m).map((m) => [Number(m![1]), Number(m![2])]);
  const archiveExtents = extents(path.basename(good.archive));
  const statementBlocks = extents(path.basename(good.statement)).flat();
  const first = archiveExtents[0]![0]!;
  const last = archiveExtents[archiveExtents.length - 1]![1]!;
  const cut = Math.floor((first + last) / 2);
  t.ok(statementBlocks.every((b) => b < cut), 'the statement stays readable');
  // the device now ends in the middle of the archive: reads past it fail with EIO, as a pulled stick's
  await truncate(img, cut * 4096);
  execFileSync('losetup', ['-c', dev]);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The USB stick was removed while the agent image was read: plug it in again'));
  t.match(r.stderr, /cannot be read whole \(stick removed while it was read\?\): cp: .*Input\/output error/);
  await nothingLoaded(t, node, r);
  execFileSync('umount', [mnt]);
  mounted = false;
  await rm(mnt, { recursive: true, force: true });
  await loadsGood(t, node);
});

t.test('two bootstraps at once (the path unit and the boot): one loads, the other waits and finds it installed', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, good);
  const [a, b] = await Promise.all([runBootstrap(node), runBootstrap(node)]);
  t.equal(a.code, 0, a.stderr);
  t.equal(b.code, 0, b.stderr);
  const loads = (a.stderr + b.stderr).match(/^bundle-agent-bootstrap: loading /gm) ?? [];
  t.equal(loads.length, 1, 'loaded once');
  t.match(a.stderr + b.stderr, /is installed: nothing to do/);
  const store = await storeContents(node);
  t.equal(store.images.length, 1, 'one image in the store');
});

t.test('a statement larger than 4 KiB, and one with a repeated field: refused without reading further', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, good);
  const f = path.join(dir, path.basename(good.statement));
  await appendFile(f, 'x'.repeat(5000));
  const big = await runBootstrap(node);
  t.equal(big.code, 1);
  t.match(big.stderr, /larger than a statement \(4096\)/);
  await nothingLoaded(t, node, big);
});

t.test('--help teaches; an unknown argument is a usage error', async (t) => {
  const help = spawnSync('/bin/bash', [path.join(process.cwd(), 'deploy/openshift/bundle-agent-bootstrap.sh'), '--help'], { encoding: 'utf8' });
  t.equal(help.status, 2);
  t.match(help.stderr, /--media DIR/);
  t.match(help.stderr, /--no-start/);
  const bad = spawnSync('/bin/bash', [path.join(process.cwd(), 'deploy/openshift/bundle-agent-bootstrap.sh'), '--bogus'], { encoding: 'utf8' });
  t.equal(bad.status, 2);
  t.match(bad.stderr, /unknown argument: --bogus/);
});

t.test('--installed (the unit\'s ExecCondition=): 1 until the image the unit runs is in storage, then 0', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const before = await runBootstrap(node, ['--installed']);
  t.equal(before.code, 1);
  t.match(before.stderr, /the agent image localhost\/offline-bundle\/bundle-agent:0\.1\.0 is not in storage yet: bundle-agent waits for a stick/);
  t.equal(before.console, undefined, 'the check writes nothing');
  await loadsGood(t, node);
  const after = await runBootstrap(node, ['--installed']);
  t.equal(after.code, 0, after.stderr);
});

t.test('the unit\'s own Image= already in storage (put there by other means): nothing loaded from the stick', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  execFileSync('skopeo', ['copy', '--quiet', `oci-archive:${edSigned.archive}`, `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.1.0`]);
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /the agent image localhost\/offline-bundle\/bundle-agent:0\.1\.0 is installed: nothing to do/);
  t.equal(r.dropIn, undefined);
});

t.test('plain unit (podman before 4.4): the drop-in sets BUNDLE_AGENT_IMAGE by digest in bundle-agent.service.d', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa, { unit: 'plain' });
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.strictSame((r.dropIn ?? '').split('\n').filter((l) => l && !l.startsWith('#')), ['[Service]', `Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${good.manifest}`]);
  t.equal((await runBootstrap(node, ['--installed'])).code, 0);
});

t.test('no agent unit installed: refused with the fix', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa, { unit: 'none' });
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /no bundle-agent unit is installed .*: install the MachineConfig first/);
  t.strictSame(await storeContents(node), { images: [], layers: [] });
});

t.test('k3s / RKE2 / containerd (--containerd SOCKET): verified, imported into k8s.io under the name the DaemonSet uses, by the signed digest; again: nothing to do', { skip: process.getuid?.() !== 0 && 'needs root (containerd)' }, async (t) => {
  const ctd = await startContainerd();
  t.teardown(() => ctd.stop());
  const ls = () => execFileSync('ctr', ['--address', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' }).split('\n').slice(1).filter(Boolean).map((l) => l.split(/\s+/));
  const node = await makeNode(await nodeDir(), other, { unit: 'none' });
  await plug(node, good);
  const refused = await runBootstrap(node, ['--containerd', ctd.socket]);
  t.equal(refused.code, 1);
  t.match(refused.console ?? '', /not signed by this cluster's key/);
  t.strictSame(ls(), [], 'nothing imported');
  await writeKey(node, ecdsa);
  // a second stick with an older agent the DaemonSet pins (image: …:0.8.0): --want-version imports that one
  await plug(node, older, { name: 'sdc1' });
  const pinned = await runBootstrap(node, ['--containerd', ctd.socket, '--want-version', '0.8.0']);
  t.equal(pinned.code, 0, pinned.stderr);
  t.strictSame(ls().map((i) => i[0]).filter((ref) => !ref!.startsWith('sha256:')), [`${AGENT_REPOSITORY}:0.8.0`], 'the version the DaemonSet names, not the newest');
  const r = await runBootstrap(node, ['--containerd', ctd.socket]);
  t.equal(r.code, 0, r.stderr);
  const images = ls();
  t.strictSame(images.map((i) => [i[0], i[2]]).filter(([ref]) => !ref!.startsWith('sha256:') && !ref!.endsWith(':0.8.0')), [[`${AGENT_REPOSITORY}:0.9.0`, good.manifest]], 'named localhost/offline-bundle/bundle-agent:0.9.0, the signed manifest digest');
  t.equal(r.dropIn, undefined, 'no unit drop-in on k3s');
  t.equal(r.console, ISSUE('The agent image (bundle-agent 0.9.0) was imported from the USB stick; the agent\'s pod starts if the DaemonSet names this version'), 'no promise of a start it cannot know');
  const again = await runBootstrap(node, ['--containerd', ctd.socket]);
  t.equal(again.code, 0);
  t.match(again.stderr, /is already in containerd: nothing to do/);
});

/** A statement signed with the factory's ECDSA key by openssl, as `bundle create` would sign one, with fields of our choosing. */
async function signedStatement(dir: string, fields: Record<string, string>): Promise<void> {
  const lines = ['offline-bundle-agent-image 1', ...Object.entries(fields).map(([k, v]) => `${k} ${v}`)].map((l) => `${l}\n`).join('');
  const signed = path.join(dir, 'signed.tmp');
  await writeFile(signed, lines);
  const sig = execFileSync('openssl', ['dgst', '-sha256', '-sign', ecdsa.key, signed]);
  await rm(signed);
  await writeFile(path.join(dir, `bundle-agent-${fields.version ?? 'x'}-amd64.oci.tar.sig`), `${lines}signature ${sig.toString('base64')}\n`);
}

t.test('signed but out of bounds: an archive over 4 GiB, a file name with a path, a repeated field; each refused before any read of an archive', async (t) => {
  const text = await readFile(good.statement, 'utf8');
  const field = (k: string) => new RegExp(`^${k} (.*)$`, 'm').exec(text)![1]!;
  const base = { file: path.basename(good.archive), size: field('size'), sha256: field('sha256'), manifest: field('manifest'), image: field('image'), version: field('version'), arch: 'amd64', signer: field('signer') };
  const cases: [string, Record<string, string>, RegExp][] = [
    ['over 4 GiB', { ...base, size: '5000000000' }, /size 5000000000 is over the 4294967296 bytes an agent image may have/],
    ['a size of 13 digits', { ...base, size: '1000000000000' }, /a field is malformed/],
    ['a path in file', { ...base, file: '../../etc/bundle-agent-0.9.0-amd64.oci.tar' }, /a field is malformed/],
    ['an image name not the agent\'s', { ...base, image: 'quay.io/evil/agent:0.9.0' }, /a field is malformed/],
    ['a short digest', { ...base, manifest: 'sha256:abc' }, /a field is malformed/],
  ];
  for (const [what, fields, why] of cases) {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = path.join(node.media, 'bundle-agent', 'sdb1');
    await mkdir(dir, { recursive: true });
    await copyFile(good.archive, path.join(dir, path.basename(good.archive)));
    await signedStatement(dir, fields);
    const r = await runBootstrap(node);
    t.equal(r.code, 1, `${what}: refused`);
    t.match(r.stderr, why, what);
    t.equal(r.console, ISSUE('The agent image on the USB stick is damaged: copy it from the factory again'), `${what}: the console line`);
    await nothingLoaded(t, node, r);
  }
  // the same fields as bundle create signs them load: the helper signs as the builder does
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(dir, { recursive: true });
  await copyFile(good.archive, path.join(dir, path.basename(good.archive)));
  await signedStatement(dir, base);
  const ok = await runBootstrap(node);
  t.equal(ok.code, 0, ok.stderr);
});

t.test('a field given twice (signed): not a statement this bootstrap reads', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(dir, { recursive: true });
  const text = await readFile(good.statement, 'utf8');
  const signed = text.split('\n').slice(0, -2).join('\n') + '\narch arm64\n';
  await writeFile(path.join(dir, 's.tmp'), signed);
  const sig = execFileSync('openssl', ['dgst', '-sha256', '-sign', ecdsa.key, path.join(dir, 's.tmp')]);
  await rm(path.join(dir, 's.tmp'));
  await writeFile(path.join(dir, path.basename(good.statement)), `${signed}signature ${sig.toString('base64')}\n`);
  await copyFile(good.archive, path.join(dir, path.basename(good.archive)));
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /signed, but not a statement this bootstrap reads \(format or a field missing or repeated\)/);
  await nothingLoaded(t, node, r);
});

t.test('a statement named with a newline and an escape sequence: one journal line, no control character on the console', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'bundle-agent-1\n\u001b[2J-amd64.oci.tar.sig'), 'offline-bundle-agent-image 1\nsignature AAAA\n');
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.stderr.trim().split('\n').length, 1, `one line: ${JSON.stringify(r.stderr)}`);
  t.notMatch(r.stderr.trim(), /[\u0000-\u001f]/, 'no control character in the journal line');
  t.notMatch(r.console ?? '', /[\u0000-\u0009\u000b-\u001f]/, 'none on the console');
  await nothingLoaded(t, node, r);
});

t.test('a mount point made before its stick is mounted (systemd-mount makes the directory first): waited for, then loaded', { skip: process.getuid?.() !== 0 && 'needs root (mount)' }, async (t) => {
  const d = await nodeDir();
  const node = await makeNode(d, ecdsa);
  // the stick's files, outside the media root until mounted there
  const stick = path.join(d, 'stick');
  await mkdir(stick);
  for (const f of [good.statement, good.archive, good.bundle]) await copyFile(f, path.join(stick, path.basename(f)));
  const mnt = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(mnt, { recursive: true });
  const child = spawn('/bin/bash', [BOOTSTRAP, '--media', node.media, '--keys', node.keys, '--root', node.root, '--work', node.work, '--storage', node.storage, '--no-start'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  // the mount comes once the script says it waits for it: no sleep in the test
  const waiting = new Promise<void>((resolve) => child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
    if (stderr.includes(`waiting for ${mnt} to be mounted`)) resolve();
  }));
  const done = new Promise<number | null>((resolve) => child.on('close', resolve));
  await Promise.race([waiting, done]);
  t.match(stderr, /waiting for .*sdb1 to be mounted \(10 s at most\)/, 'it waits for the empty mount point');
  execFileSync('mount', ['--bind', '-o', 'ro', stick, mnt]);
  t.teardown(() => { spawnSync('umount', [mnt]); });
  t.equal(await done, 0, stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), good.manifest, 'loaded from the stick mounted meanwhile');
});

t.test('stopped (SIGTERM to every process of the run, as systemctl stop and TimeoutStartSec= send it) while skopeo unpacks: exit 143, no image, no copy, none of skopeo\'s temporary files, the console no longer says "Loading"; the next run loads', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, good);
  const child = spawn('/bin/bash', [BOOTSTRAP, '--media', node.media, '--keys', node.keys, '--root', node.root, '--work', node.work, '--storage', node.storage, '--no-start'], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const done = new Promise<number | null>((resolve) => child.on('close', (code, signal) => resolve(code ?? (signal ? -1 : null))));
  // stop once skopeo has made its temporary directories (oci-archive unpacking): in the run's own
  // directory under --work (skopeo 1.9 ignores TMPDIR: without --tmpdir they go to /var/tmp and stay there)
  const skopeoDirs = async () => (await Promise.all((await readdir(node.work)).map((d) => readdir(path.join(node.work, d)).catch(() => [] as string[]))))
    .flat().filter((f) => /^(oci|storage)\d+$/.test(f));
  let exited = false;
  void done.then(() => { exited = true; });
  while (!exited && (await skopeoDirs()).length === 0) await new Promise((r) => setImmediate(r));
  t.notOk(exited, 'skopeo was unpacking into the run\'s directory under --work when stopped');
  process.kill(-child.pid!, 'SIGTERM');
  t.equal(await done, 143, stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), undefined, 'no image');
  t.strictSame(await workLeftovers(node), [], 'no copy left');
  t.strictSame(await readdir(node.work), [], 'nothing of skopeo\'s left: its directories were inside the run\'s');
  t.equal((await readFile(path.join(node.root, 'run/issue.d/bundle-agent.issue'), 'utf8')), ISSUE('Loading the agent was stopped before it finished: nothing was loaded; plug the USB stick in again'));
  t.match(stderr, /stopped while loading the agent image: nothing was loaded/);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), good.manifest);
  t.equal((await storeContents(node)).images.length, 1);
});

t.test('several agents on the sticks: the highest SIGNED version (semver) is loaded, whatever the file names and stick order say', async (t) => {
  // sdb1 0.9.0, sdc1 0.8.0: by path the older one sorts last
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, good, { name: 'sdb1' });
  await plug(node, older, { name: 'sdc1' });
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.match(r.dropIn ?? '', new RegExp(`^Image=${AGENT_REPOSITORY}@${good.manifest}$`, 'm'), '0.9.0 over 0.8.0');
  t.match(r.stderr, /chose bundle-agent 0\.9\.0 .*the newest signed one of/);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.8.0`), undefined, 'the older one not loaded');
  // a release over its release candidate (which sort -V puts after it), and a statement renamed to look newer
  const node2 = await makeNode(await nodeDir(), ecdsa);
  const d = await plug(node2, release, { name: 'sdb1' });
  await plug(node2, candidate, { name: 'sdc1' });
  const o = path.join(d, 'old');
  await mkdir(o);
  await copyFile(older.statement, path.join(o, 'bundle-agent-9.9.9-amd64.oci.tar.sig'));
  await copyFile(older.archive, path.join(o, path.basename(older.archive)));
  const r2 = await runBootstrap(node2);
  t.equal(r2.code, 0, r2.stderr);
  t.match(r2.dropIn ?? '', new RegExp(`^Image=${AGENT_REPOSITORY}@${release.manifest}$`, 'm'), '1.0.0 over 1.0.0-rc.1 and over a 0.8.0 named 9.9.9');
});

t.test('the newest signed agent with a damaged archive: that fault is reported, no silent fall back to an older one', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = await plug(node, good, { name: 'sdb1' });
  await plug(node, older, { name: 'sdc1' });
  await truncate(path.join(dir, path.basename(good.archive)), 1000);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The agent image on the USB stick is incomplete (a copy cut short?): copy it again'));
  await nothingLoaded(t, node, r);
});

t.test('never older than the unit\'s own Image= tag (the agent would switch back to that image, which the node lacks)', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const unit = path.join(node.root, 'etc/containers/systemd/bundle-agent.container');
  await writeFile(unit, (await readFile(unit, 'utf8')).replace(/^Image=.*$/m, `Image=${AGENT_REPOSITORY}:0.8.5`));
  await plug(node, older);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /bundle-agent 0\.8\.0 is older than the unit's own image \(localhost\/offline-bundle\/bundle-agent:0\.8\.5 in \/etc\/containers\/systemd\/bundle-agent\.container\): bring bundle-agent 0\.8\.5 or newer/);
  t.equal(r.console, ISSUE('The agent on the USB stick (0.8.0) is older than this node needs (0.8.5): bring a newer one'));
  await nothingLoaded(t, node, r);
  await loadsGood(t, node);
});

t.test('several statements, none loadable: the console gives the reason of the one that came closest, not of the last one tried', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, arm, { name: 'sdc1' });
  const junk = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(junk, { recursive: true });
  await writeFile(path.join(junk, 'bundle-agent-0.0.1-amd64.oci.tar.sig'), 'junk\n');
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(r.console, ISSUE('The agent image on the USB stick is for arm64, this node is amd64: bring the amd64 one'));
  t.match(r.stderr, /none of the 2 agent image statements can be loaded; the closest: .*is for arm64/);
});

t.test('at most 32 statements are read: 40 junk ones cost 32 checks and one line saying so', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const junk = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(junk, { recursive: true });
  for (let i = 0; i < 40; i++) await writeFile(path.join(junk, `bundle-agent-0.0.${i}-amd64.oci.tar.sig`), 'offline-bundle-agent-image 1\nsignature AAAA\n');
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /40 agent image statements on the media: only the first 32 \(by path\) are read/);
  t.equal((r.stderr.match(/^bundle-agent-bootstrap: \/.*does not verify/gm) ?? []).length, 32, '32 signature checks');
  t.equal(r.console, ISSUE('The agent image on the USB stick is not signed by this cluster\'s key: nothing was loaded'));
});

t.test('trust as the agent\'s: the keys of config.yaml trust.keys only (not every *.pub beside them); a key others could change, or none, refuses', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const config = path.join(node.root, 'etc/bundle-agent/config.yaml');
  await writeFile(config, 'root: /\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]   # the factory\nversion:\n  current: "1.0.0"\n');
  await writeKey(node, other, 'other.pub');
  await plug(node, otherSigned);
  const r = await runBootstrap(node, [], { keys: 'config' });
  t.equal(r.code, 1);
  t.match(r.stderr, /does not verify with any trusted key \(.*\/etc\/bundle-agent\/keys\/factory\.pub, from trust\.keys of .*config\.yaml\)/, 'other.pub is in the directory but not in trust.keys');
  await nothingLoaded(t, node, r);
  // the block form, with the other key listed: trusted
  await writeFile(config, 'trust:\n  keys:\n    - "/etc/bundle-agent/keys/other.pub"\n    - \'/etc/bundle-agent/keys/factory.pub\'\n');
  const ok = await runBootstrap(node, [], { keys: 'config' });
  t.equal(ok.code, 0, ok.stderr);
  // group-writable: refused as the agent refuses it
  const node2 = await makeNode(await nodeDir(), ecdsa);
  await writeFile(path.join(node2.root, 'etc/bundle-agent/config.yaml'), 'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n');
  await chmod(path.join(node2.keys, 'factory.pub'), 0o664);
  await plug(node2, good);
  const unsafe = await runBootstrap(node2, [], { keys: 'config' });
  t.equal(unsafe.code, 1);
  t.match(unsafe.stderr, /trusted key .*factory\.pub is writable by its group \(mode 664\): chmod go-w .*factory\.pub \(the agent refuses it too\)/);
  t.equal(unsafe.console, ISSUE('The node\'s trusted key could be changed by others: nothing was loaded (see journalctl -u bundle-agent-bootstrap)'));
  await nothingLoaded(t, node2, unsafe);
  // no key at all: said so, not "not signed by this cluster's key"
  const node3 = await makeNode(await nodeDir(), ecdsa);
  await rm(path.join(node3.keys, 'factory.pub'));
  await plug(node3, good);
  const none = await runBootstrap(node3);
  t.equal(none.code, 1);
  t.match(none.stderr, /no trusted key configured/);
  t.equal(none.console, ISSUE('No trusted key is configured on this node: nothing was loaded (see journalctl -u bundle-agent-bootstrap)'));
  await writeFile(path.join(node3.root, 'etc/bundle-agent/config.yaml'), 'trust:\n  keys: []\n');
  t.match((await runBootstrap(node3, [], { keys: 'config' })).stderr, /no trusted key configured \(trust\.keys of .* is empty\)/);
});

t.test('plain unit (podman before 4.4), README\'s upgrade as written: the first agent tagged like the unit\'s default Image= (0.1.0), then a stick with 0.9.0 and bundle-agent-bootstrap.sh --upgrade', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa, { unit: 'plain' });
  await plug(node, first);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.match(r.dropIn ?? '', new RegExp(`^Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${first.manifest}$`, 'm'));
  t.notMatch(r.dropIn ?? '', /The agent replaces/, 'the plain unit\'s agent does not replace it');
  t.match(r.dropIn ?? '', /--upgrade replaces this file/);
  await unplug(node);
  await plug(node, good);
  t.match((await runBootstrap(node)).stderr, /is installed: nothing to do \(a newer agent from a stick: --upgrade\)/, 'a plain run leaves the running agent alone');
  const up = await runBootstrap(node, ['--upgrade']);
  t.equal(up.code, 0, up.stderr);
  t.match(up.dropIn ?? '', new RegExp(`^Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${good.manifest}$`, 'm'), 'now 0.9.0, by digest');
  t.equal(up.console, ISSUE('The agent (bundle-agent 0.9.0) was loaded from the USB stick and is starting'));
  const again = await runBootstrap(node, ['--upgrade']);
  t.equal(again.code, 0, again.stderr);
  t.match(again.stderr, /is bundle-agent 0\.9\.0, the newest on the stick: nothing to do/);
  // an older stick never downgrades it
  await unplug(node);
  await plug(node, older);
  const down = await runBootstrap(node, ['--upgrade']);
  t.equal(down.code, 1);
  t.match(down.stderr, /bundle-agent 0\.8\.0 is older than the installed agent \(0\.9\.0/);
  t.match(down.dropIn ?? '', new RegExp(good.manifest), 'still 0.9.0');  // the Quadlet agent's drop-in is its own (switch and rollback): --upgrade refuses it
  const quadlet = await makeNode(await nodeDir(), ecdsa);
  await plug(quadlet, good);
  const refused = await runBootstrap(quadlet, ['--upgrade']);
  t.equal(refused.code, 2);
  t.match(refused.stderr, /--upgrade is for the plain unit/);
  t.equal(refused.dropIn, undefined);
});
