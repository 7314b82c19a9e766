// deploy/openshift/bundle-agent-bootstrap.sh, run directly (bash) as a node with no agent and no
// registry would run it: the sidecar `bundle create --agent-image` wrote, on "sticks" (directories,
// a loop-mounted ext4 image for the pulled stick), checked with the real openssl, loaded with the
// real skopeo into a containers-storage under a temp root (vfs), disk full on real tmpfs mounts.
// Without systemd (--no-start): the booted-node test runs the same script under systemd.
// The first half; bootstrap-more.test.ts has the rest, bootstrap-setup.ts what both share.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  appendFile,
  copyFile,
  mkdir,
  readFile,
  rm,
  symlink,
  truncate,
  writeFile,
  open,
} from 'node:fs/promises';
import path from 'node:path';
import {
  AGENT_REPOSITORY,
  makeSidecar,
  makeNode,
  runBootstrap,
  storeContents,
  storedDigest,
  workLeftovers,
  writeKey,
} from './lib.js';
import {
  work,
  ecdsa,
  ed25519,
  other,
  good,
  arm,
  nodeDir,
  plug,
  nothingLoaded,
  loadsGood,
  ISSUE,
} from './bootstrap-setup.js';

const edSigned = await makeSidecar(work, ed25519, { version: '0.9.1' });

t.test(
  'a stick with the agent image: verified, loaded by digest, the Quadlet drop-in names the digest; a second run does nothing',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`),
      good.manifest,
      'skopeo kept the manifest digest the statement signs',
    );
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${good.manifest}`),
      good.manifest,
      'and the image is found by that digest, as Quadlet will ask',
    );
    const dropIn = r.dropIn ?? '';
    t.match(dropIn, /^\[Container\]$/m);
    t.strictSame(
      dropIn.split('\n').filter((l) => l && !l.startsWith('#')),
      ['[Container]', `Image=${AGENT_REPOSITORY}@${good.manifest}`],
      'only Image=, by digest',
    );
    t.equal(
      r.console,
      ISSUE('The agent (bundle-agent 0.9.0) was loaded from the USB stick and is starting'),
    );
    t.match(
      r.stderr,
      /loading localhost\/offline-bundle\/bundle-agent:0\.9\.0 \(sha256:[0-9a-f]{64}\) from .*signed by .*factory\.pub/,
    );
    t.strictSame(await workLeftovers(node), [], 'the copy is removed');
    const again = await runBootstrap(node);
    t.equal(again.code, 0);
    t.match(again.stderr, /is installed: nothing to do/);
    t.notMatch(again.stderr, /loading/, 'not loaded twice');
  },
);

t.test('an Ed25519 key: checked with openssl pkeyutl -rawin, loaded', async (t) => {
  const node = await makeNode(await nodeDir(), ed25519);
  await writeKey(node, other, 'unrelated.pub');
  await plug(node, edSigned);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, r.stderr);
  t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.1`), edSigned.manifest);
});

t.test(
  'signed by a key the node does not trust: nothing loaded, one console line; then a good stick works',
  async (t) => {
    const node = await makeNode(await nodeDir(), other);
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE(
        "The agent image on the USB stick is not signed by this cluster's key: nothing was loaded",
      ),
    );
    t.match(
      r.stderr,
      /the signature does not verify with any trusted key \(.*factory\.pub, from .*keys\/\*\.pub\): wrong key, or altered/,
    );
    t.notMatch(r.stderr, /signed by/, 'no signer named from the unverified statement');
    t.equal(r.stderr.trim().split('\n').length, 1, 'one journal line');
    await nothingLoaded(t, node, r);
    await writeKey(node, ecdsa);
    await loadsGood(t, node);
  },
);

t.test(
  'a statement altered after signing (another arch written in): refused as unsigned',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = await plug(node, arm);
    const f = path.join(dir, path.basename(arm.statement));
    await writeFile(f, (await readFile(f, 'utf8')).replace(/^arch arm64$/m, 'arch amd64'));
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.match(r.console ?? '', /not signed by this cluster's key/);
    await nothingLoaded(t, node, r);
  },
);

t.test(
  'a truncated archive (a copy cut short): refused before loading; then a good stick works',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = await plug(node, good);
    await truncate(path.join(dir, path.basename(good.archive)), 1_000_000);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE('The agent image on the USB stick is incomplete (a copy cut short?): copy it again'),
    );
    t.match(r.stderr, /1000000 bytes, the statement says \d+: an incomplete copy/);
    await nothingLoaded(t, node, r);
    await loadsGood(t, node);
  },
);

t.test(
  'an archive of the right size with one byte changed: the sha256 of the copy refuses it',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = await plug(node, good);
    const fh = await open(path.join(dir, path.basename(good.archive)), 'r+');
    await fh.write(Buffer.from('X'), 0, 1, 2_000_000);
    await fh.close();
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.match(r.stderr, /does not hash to the statement's sha256/);
    t.equal(
      r.console,
      ISSUE('The agent image on the USB stick is damaged: copy it from the factory again'),
    );
    await nothingLoaded(t, node, r);
  },
);

t.test('an agent image for another architecture: refused, the console names both', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  await plug(node, arm);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.equal(
    r.console,
    ISSUE('The agent image on the USB stick is for arm64, this node is amd64: bring the amd64 one'),
  );
  await nothingLoaded(t, node, r);
  await loadsGood(t, node);
});

t.test(
  'a stick with a bundle and no agent image: a console line; no stick at all: nothing, quietly',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const none = await runBootstrap(node);
    t.equal(none.code, 0);
    t.equal(none.console, undefined, 'no console line without a stick');
    t.match(none.stderr, /no stick with an agent image under .*: nothing to do/);
    await plug(node, good, { sidecar: false });
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE(
        'The USB stick has no agent image, and this node has no agent yet: bring a stick made with --agent-image',
      ),
    );
    await nothingLoaded(t, node, r);
    await loadsGood(t, node);
  },
);

t.test(
  'the statement without its archive, and an archive that is a symlink: refused, nothing followed',
  async (t) => {
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
  },
);

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
  t.strictSame(
    spawnSync('ls', ['-A', elsewhere], { encoding: 'utf8' }).stdout,
    '',
    'nothing written where the symlink points',
  );
});

t.test(
  'disk full: the image store on a 2 MiB tmpfs; nothing half-loaded; then a store with room works',
  { skip: process.getuid?.() !== 0 && 'needs root (mount)' },
  async (t) => {
    const d = await nodeDir();
    const small = path.join(d, 'small');
    await mkdir(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', small]);
    t.teardown(() => {
      execFileSync('umount', [small]);
    });
    const node = await makeNode(d, ecdsa, { storeRoot: small });
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(r.console, ISSUE("The node's disk is full: the agent image was not loaded"));
    t.match(r.stderr, /the image store is full: .*no space left on device/);
    await nothingLoaded(t, node, r);
    const roomy = { ...node, storage: `vfs@${d}/big/root+${d}/big/run` };
    const ok = await runBootstrap(roomy);
    t.equal(ok.code, 0, ok.stderr);
    t.equal(await storedDigest(roomy, `${AGENT_REPOSITORY}:0.9.0`), good.manifest);
  },
);

t.test(
  'disk full: no room for the copy off the stick (1 MiB work directory)',
  { skip: process.getuid?.() !== 0 && 'needs root (mount)' },
  async (t) => {
    const d = await nodeDir();
    const small = path.join(d, 'work');
    await mkdir(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]);
    t.teardown(() => {
      execFileSync('umount', [small]);
    });
    const node = await makeNode(d, ecdsa, { work: small });
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(r.console, ISSUE("The node's disk is full: the agent image was not loaded"));
    t.match(r.stderr, /bytes free, \d+ needed for the agent image/);
    await nothingLoaded(t, node, r);
  },
);

t.test(
  'stick pulled mid-load: the stick (ext4 on a loop device) loses its second half while the archive is read',
  { skip: process.getuid?.() !== 0 && 'needs root (losetup, mount)' },
  async (t) => {
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
    const extents = (file: string) =>
      execFileSync('filefrag', ['-v', '-b4096', path.join(mnt, file)], { encoding: 'utf8' })
        .split('\n')
        .map((l) => /^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):/.exec(l))
        .filter((m) => m)
        .map((m) => [Number(m![1]), Number(m![2])]);
    const archiveExtents = extents(path.basename(good.archive));
    const statementBlocks = extents(path.basename(good.statement)).flat();
    const first = archiveExtents[0]![0]!;
    const last = archiveExtents[archiveExtents.length - 1]![1]!;
    const cut = Math.floor((first + last) / 2);
    t.ok(
      statementBlocks.every((b) => b < cut),
      'the statement stays readable',
    );
    // the device now ends in the middle of the archive: reads past it fail with EIO, as a pulled stick's
    await truncate(img, cut * 4096);
    execFileSync('losetup', ['-c', dev]);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE('The USB stick was removed while the agent image was read: plug it in again'),
    );
    t.match(
      r.stderr,
      /cannot be read whole \(stick removed while it was read\?\): cp: .*Input\/output error/,
    );
    await nothingLoaded(t, node, r);
    execFileSync('umount', [mnt]);
    mounted = false;
    await rm(mnt, { recursive: true, force: true });
    await loadsGood(t, node);
  },
);

t.test(
  'two bootstraps at once (the path unit and the boot): one loads, the other waits and finds it installed',
  async (t) => {
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
  },
);

t.test(
  'a statement larger than 4 KiB, and one with a repeated field: refused without reading further',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = await plug(node, good);
    const f = path.join(dir, path.basename(good.statement));
    await appendFile(f, 'x'.repeat(5000));
    const big = await runBootstrap(node);
    t.equal(big.code, 1);
    t.match(big.stderr, /larger than a statement \(4096\)/);
    await nothingLoaded(t, node, big);
  },
);

t.test('--help teaches; an unknown argument is a usage error', async (t) => {
  const help = spawnSync(
    '/bin/bash',
    [path.join(process.cwd(), 'deploy/openshift/bundle-agent-bootstrap.sh'), '--help'],
    { encoding: 'utf8' },
  );
  t.equal(help.status, 2);
  t.match(help.stderr, /--media DIR/);
  t.match(help.stderr, /--no-start/);
  const bad = spawnSync(
    '/bin/bash',
    [path.join(process.cwd(), 'deploy/openshift/bundle-agent-bootstrap.sh'), '--bogus'],
    { encoding: 'utf8' },
  );
  t.equal(bad.status, 2);
  t.match(bad.stderr, /unknown argument: --bogus/);
});

t.test(
  "--installed (the unit's ExecCondition=): 1 until the image the unit runs is in storage, then 0",
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const before = await runBootstrap(node, ['--installed']);
    t.equal(before.code, 1);
    t.match(
      before.stderr,
      /the agent image localhost\/offline-bundle\/bundle-agent:0\.1\.0 is not in storage yet: bundle-agent waits for a stick/,
    );
    t.equal(before.console, undefined, 'the check writes nothing');
    await loadsGood(t, node);
    const after = await runBootstrap(node, ['--installed']);
    t.equal(after.code, 0, after.stderr);
  },
);

t.test(
  "the unit's own Image= already in storage (put there by other means): nothing loaded from the stick",
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    execFileSync('skopeo', [
      'copy',
      '--quiet',
      `oci-archive:${edSigned.archive}`,
      `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.1.0`,
    ]);
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stderr,
      /the agent image localhost\/offline-bundle\/bundle-agent:0\.1\.0 is installed: nothing to do/,
    );
    t.equal(r.dropIn, undefined);
  },
);

t.test(
  'plain unit (podman before 4.4): the drop-in sets BUNDLE_AGENT_IMAGE by digest in bundle-agent.service.d',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa, { unit: 'plain' });
    await plug(node, good);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.strictSame(
      (r.dropIn ?? '').split('\n').filter((l) => l && !l.startsWith('#')),
      ['[Service]', `Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${good.manifest}`],
    );
    t.equal((await runBootstrap(node, ['--installed'])).code, 0);
  },
);

t.test('no agent unit installed: refused with the fix', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa, { unit: 'none' });
  await plug(node, good);
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(r.stderr, /no bundle-agent unit is installed .*: install the MachineConfig first/);
  t.strictSame(await storeContents(node), { images: [], layers: [] });
});
