// The agent archive a node keeps for after CRI-O's wipe (issue 38): deploy/openshift/
// bundle-agent-bootstrap.sh run directly (bash, --no-start) against a containers-storage under a
// temp root (vfs) with the real skopeo and openssl, as test/deploy/bootstrap*.test.ts run it. The
// booted node (offline-model-booted.test.ts) shows the same under systemd across a reboot; here
// are the cases a boot would make slow: what is kept, which kept pair is loaded, each refusal,
// and a self-upgrade's newer agent followed (the switch itself written as the agent writes it).
import t, { type Test } from 'tap';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  copyFile,
  mkdir,
  readFile,
  readdir,
  rm,
  stat,
  truncate,
  writeFile,
  open,
} from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  AGENT_REPOSITORY,
  BOOTSTRAP,
  keygen,
  makeNode,
  makeSidecar,
  runBootstrap,
  storeContents,
  storedDigest,
  type Node,
  type Sidecar,
} from '../deploy/lib.js';

const work = await tmpdir(t, 'ob-kept-');
const key = await keygen(work, 'factory');
const first = await makeSidecar(work, key, { version: '0.9.0', layerBytes: 200_000 });
const newer = await makeSidecar(work, key, { version: '0.9.5', layerBytes: 200_000 });
let nodes = 0;

const KEPT = 'var/lib/bundle-agent/agent-image';
const kept = async (node: Node) =>
  (await readdir(path.join(node.root, KEPT)).catch(() => [] as string[])).sort();
const names = (s: Sidecar) => [path.basename(s.archive), path.basename(s.statement)];

async function plug(node: Node, s: Sidecar): Promise<void> {
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  execFileSync('mkdir', ['-p', dir]);
  execFileSync('cp', [s.bundle, s.archive, s.statement, dir]);
}
const unplug = (node: Node) =>
  rm(path.join(node.media, 'bundle-agent'), { recursive: true, force: true });
/** What crio-wipe does to the store podman shares: the images go. */
const wipe = (node: Node) => {
  for (const v of ['0.9.0', '0.9.5'])
    spawnSync(
      'skopeo',
      ['delete', `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:${v}`],
      { stdio: 'ignore' },
    );
};
const DROP_IN = 'etc/containers/systemd/bundle-agent.container.d/image.conf';
const dropIn = (node: Node) => readFile(path.join(node.root, DROP_IN), 'utf8');
/** A bundle's self-upgrade as the agent makes it: the image pulled through CRI-O into the shared store, its drop-in. */
async function selfUpgrade(node: Node, s: Sidecar): Promise<void> {
  execFileSync('skopeo', [
    'copy',
    '--quiet',
    `oci-archive:${s.archive}`,
    `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:${s.version}`,
  ]);
  await pointAt(node, s);
}
const pointAt = (node: Node, s: Sidecar) =>
  writeFile(
    path.join(node.root, DROP_IN),
    `# Written by bundle-agent: the agent image a bundle brought.\n[Container]\nImage=${AGENT_REPOSITORY}@${s.manifest}\n`,
  );
/** One byte of a file changed, its size kept. */
async function flipByte(file: string): Promise<void> {
  const fh = await open(file, 'r+');
  await fh.write(Buffer.from('X'), 0, 1, (await fh.stat()).size - 2048);
  await fh.close();
}
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

t.test(
  'an install from a stick keeps the checked archive and its statement; after a wipe --installed loads it again',
  async (t) => {
    const node = await installedNode(t);
    t.strictSame(await kept(node), names(first), `kept in ${KEPT}: the archive and its statement`);
    for (const f of names(first)) {
      t.equal(
        (await readFile(path.join(node.root, KEPT, f))).equals(
          await readFile(path.join(first.dir, f)),
        ),
        true,
        `${f}: the very bytes checked`,
      );
      t.equal(
        (await stat(path.join(node.root, KEPT, f))).mode & 0o777,
        0o600,
        `${f}: root's alone`,
      );
    }
    t.equal((await installed(node)).code, 0, 'installed: nothing loaded');
    wipe(node);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${first.manifest}`),
      undefined,
      'wiped: the image the unit names is gone',
    );
    const r = await installed(node);
    t.equal(r.code, 0, `--installed loads it again and says installed: ${r.stderr}`);
    t.equal(r.stderr.trim().split('\n').length, 1, 'one line says so');
    t.match(
      r.stderr,
      /the agent image localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} is not in storage \(after an unclean shutdown CRI-O wipes the store podman shares\): loaded bundle-agent 0\.9\.0 again from .*agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar, signed by .*factory\.pub/,
    );
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${first.manifest}`),
      first.manifest,
      'in storage again under the digest the unit names',
    );
    t.strictSame(await kept(node), names(first), 'still kept for the next wipe');
  },
);

t.test(
  'a tampered kept archive is refused in one line; storage stays as the wipe left it',
  async (t) => {
    const node = await installedNode(t);
    await flipByte(path.join(node.root, KEPT, path.basename(first.archive)));
    wipe(node);
    const r = await installed(node);
    t.equal(r.code, 1, 'not installed: the unit is skipped');
    t.equal(
      r.stderr.trim().split('\n').length,
      1,
      `one line in all, the cause and what the unit does: ${r.stderr}`,
    );
    t.match(
      r.stderr,
      /is not in storage .*and the copy kept in .* was refused: .*: bundle-agent waits for a stick with the agent image/,
    );
    const refusals = r.stderr
      .split('\n')
      .filter((l) => /does not hash to the statement's sha256/.test(l));
    t.equal(refusals.length, 1, `one line names the kept archive and the cause: ${refusals[0]}`);
    t.match(refusals[0], /agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar: does not hash/);
    t.strictSame(
      await storeContents(node),
      { images: [], layers: [] },
      'no image and no layer in the store',
    );
    t.match(
      r.console,
      /The copy of the agent kept on this node was refused/,
      'the console says so',
    );
  },
);

t.test(
  'a kept statement altered (its signature no longer verifies): refused, nothing loaded',
  async (t) => {
    const node = await installedNode(t);
    const statement = path.join(node.root, KEPT, path.basename(first.statement));
    await writeFile(
      statement,
      (await readFile(statement, 'utf8')).replace(/^arch amd64$/m, 'arch amd64 '),
    );
    wipe(node);
    const r = await installed(node);
    t.equal(r.code, 1);
    t.match(
      r.stderr,
      /agent-image\/bundle-agent-0\.9\.0-amd64\.oci\.tar\.sig: the signature does not verify with any trusted key/,
    );
    t.strictSame(await storeContents(node), { images: [], layers: [] }, 'nothing loaded');
  },
);

t.test('a kept pair of another agent than the unit names is not loaded', async (t) => {
  const node = await installedNode(t);
  const dropIn = path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d/image.conf');
  await writeFile(dropIn, `[Container]\nImage=${AGENT_REPOSITORY}@${newer.manifest}\n`);
  wipe(node);
  const r = await installed(node);
  t.equal(r.code, 1);
  t.match(
    r.stderr,
    /the agent archives kept in .* are not localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} \(the image the unit runs\): none loaded/,
  );
  t.strictSame(await storeContents(node), { images: [], layers: [] }, 'nothing loaded');
});

t.test(
  'a self-upgrade is followed: a stick with a newer agent leaves it kept; once the unit runs it, the older pair goes; a wipe loads the newer',
  async (t) => {
    const node = await installedNode(t);
    await plug(node, newer);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stderr, /is installed: nothing to do/);
    t.match(r.stderr, /kept bundle-agent-0\.9\.5-amd64\.oci\.tar \(bundle-agent 0\.9\.5/);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.5`),
      undefined,
      'not loaded: the agent switches itself',
    );
    t.strictSame(
      await kept(node),
      [...names(first), ...names(newer)].sort(),
      'both kept: the one the unit runs, the newest',
    );
    const again = await runBootstrap(node);
    t.notMatch(again.stderr, /kept bundle-agent/, 'kept once, not copied again');
    await unplug(node);
    // the switch as the agent makes it: the image pulled through CRI-O into the shared store, its drop-in
    execFileSync('skopeo', [
      'copy',
      '--quiet',
      `oci-archive:${newer.archive}`,
      `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.9.5`,
    ]);
    await writeFile(
      path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d/image.conf'),
      `# Written by bundle-agent: the agent image a bundle brought.\n[Container]\nImage=${AGENT_REPOSITORY}@${newer.manifest}\n`,
    );
    const boot = await runBootstrap(node);
    t.equal(boot.code, 0, boot.stderr);
    t.strictSame(
      await kept(node),
      names(newer),
      `the next run keeps only the pair the unit runs: ${boot.stderr
        .split('\n')
        .filter((l) => /removed/.test(l))
        .join('; ')}`,
    );
    execFileSync(
      'skopeo',
      ['delete', `containers-storage:[${node.storage}]${AGENT_REPOSITORY}:0.9.5`],
      { stdio: 'ignore' },
    );
    wipe(node);
    const w = await installed(node);
    t.equal(w.code, 0, w.stderr);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${newer.manifest}`),
      newer.manifest,
      'the agent the unit runs is back',
    );
  },
);

t.test(
  'an older agent on a stick is not kept; leftovers of a stopped run are pruned',
  async (t) => {
    const node = await makeNode(path.join(work, `node-${++nodes}`), key);
    await plug(node, newer);
    t.equal((await runBootstrap(node)).code, 0);
    await unplug(node);
    await writeFile(path.join(node.root, KEPT, '.bundle-agent-0.9.5-amd64.oci.tar.Ab12Cd'), 'half');
    await plug(node, first);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.strictSame(await kept(node), names(newer), 'only the pair the unit runs');
  },
);

t.test(
  'an archive over MAX_KEPT_ARCHIVE_BYTES (1 GiB) is not kept, nor copied off the stick first: one line says so, the kept pair stays',
  async (t) => {
    const node = await installedNode(t);
    // a signed statement of a 1 GiB + 1 byte archive (sparse: no disk), re-signed with the factory key; its
    // sha256 is not the archive's, so a copy made and hashed before the size is weighed would say so
    const dir = path.join(work, 'big');
    execFileSync('mkdir', ['-p', dir]);
    const archive = path.join(dir, path.basename(newer.archive));
    execFileSync('truncate', ['-s', String(2 ** 30 + 1), archive]);
    const sha = 'ab'.repeat(32);
    const signed =
      (await readFile(newer.statement, 'utf8'))
        .split('\n')
        .filter((l) => l && !l.startsWith('signature '))
        .map((l) =>
          l
            .replace(/^size \d+$/, `size ${2 ** 30 + 1}`)
            .replace(/^sha256 [0-9a-f]+$/, `sha256 ${sha}`),
        )
        .join('\n') + '\n';
    await writeFile(path.join(dir, 'signed'), signed);
    const sig = execFileSync('openssl', [
      'dgst',
      '-sha256',
      '-sign',
      key.key,
      path.join(dir, 'signed'),
    ]).toString('base64');
    await writeFile(`${archive}.sig`, `${signed}signature ${sig}\n`);
    const stick = path.join(node.media, 'bundle-agent', 'sdb1');
    execFileSync('mkdir', ['-p', stick]);
    execFileSync('cp', ['--sparse=always', archive, `${archive}.sig`, stick]);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stderr,
      /not keeping bundle-agent-0\.9\.5-amd64\.oci\.tar: 1073741825 bytes, over the 1073741824 a kept agent archive may have/,
    );
    t.notMatch(r.stderr, /does not hash/, 'not copied off the stick nor hashed');
    t.strictSame(await kept(node), names(first), 'only the pair the unit runs is kept');
  },
);

/** A node whose agent switched itself to 0.9.5 (kept from a stick while 0.9.0 ran), then CRI-O's wipe took both images. */
async function upgradedThenWiped(t: Test): Promise<Node> {
  const node = await installedNode(t);
  await plug(node, newer);
  t.equal((await runBootstrap(node)).code, 0);
  await unplug(node);
  await selfUpgrade(node, newer);
  wipe(node);
  return node;
}

t.test(
  "a wipe with an older agent's stick left in at boot: the run loads the kept agent the unit runs again, never the stick's; damaged, the stick's older one is refused and the kept pair stays",
  async (t) => {
    const node = await upgradedThenWiped(t);
    const noStick = await runBootstrap(node);
    t.equal(noStick.code, 0, noStick.stderr);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${newer.manifest}`),
      undefined,
      "no stick: left to the agent's ExecCondition (--installed), as at every boot",
    );
    const keptArchive = path.join(node.root, KEPT, path.basename(newer.archive));
    await copyFile(keptArchive, path.join(work, 'kept-newer.oci.tar'));
    await flipByte(keptArchive);
    await plug(node, first);
    const refused = await runBootstrap(node);
    t.equal(refused.code, 1, refused.stderr);
    t.match(
      refused.stderr,
      /the copy kept in .* was refused: .*bundle-agent-0\.9\.5-amd64\.oci\.tar: does not hash.*: a stick's agent is loaded instead/,
    );
    t.match(
      refused.stderr,
      /bundle-agent 0\.9\.0 is older than the agent this node ran \(0\.9\.5, localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64}, not in storage since a wipe\): bring bundle-agent 0\.9\.5 or newer/,
    );
    t.match(await dropIn(node), newer.manifest, 'the drop-in still names the agent the unit ran');
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`),
      undefined,
      "the stick's older agent not loaded",
    );
    t.strictSame(
      await kept(node),
      [...names(first), ...names(newer)].sort(),
      'no kept pair pruned',
    );
    await copyFile(path.join(work, 'kept-newer.oci.tar'), keptArchive);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stderr,
      /the agent image localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} is not in storage \(after an unclean shutdown CRI-O wipes the store podman shares\): loaded bundle-agent 0\.9\.5 again from .*agent-image\/bundle-agent-0\.9\.5-amd64\.oci\.tar/,
    );
    t.match(await dropIn(node), newer.manifest, 'the drop-in unchanged');
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${newer.manifest}`),
      newer.manifest,
      'the agent the unit runs is back',
    );
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`),
      undefined,
      "the stick's older agent not loaded",
    );
    t.strictSame(
      await kept(node),
      names(newer),
      'the pair the unit runs kept (the older one pruned as before)',
    );
    t.equal((await installed(node)).code, 0, "the agent's ExecCondition finds it");
  },
);

/** Runs --installed; resolves `waiting` once it waits for the lock (its flock -w child runs). */
function installedWaitingForLock(node: Node): {
  waiting: Promise<void>;
  done: Promise<{ code: number | null; stderr: string }>;
} {
  const child = spawn(
    '/bin/bash',
    [
      BOOTSTRAP,
      '--keys',
      node.keys,
      '--root',
      node.root,
      '--work',
      node.work,
      '--storage',
      node.storage,
      '--installed',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stderr })),
  );
  const waiting = (async () => {
    while (
      !/^flock -w /m.test(
        spawnSync('ps', ['-o', 'args=', '--ppid', String(child.pid)], { encoding: 'utf8' }).stdout,
      )
    )
      await sleep(50);
  })();
  return { waiting, done };
}

/** Holds the bootstrap's lock, as a run loading from a stick does, until the returned function is called. */
async function holdLock(node: Node): Promise<() => Promise<void>> {
  const lock = path.join(node.root, 'run/bundle-agent-bootstrap.lock');
  const holder = spawn('flock', [lock, 'cat'], { stdio: ['pipe', 'ignore', 'ignore'] });
  while (spawnSync('flock', ['-n', lock, 'true']).status === 0) await sleep(50);
  return () =>
    new Promise((resolve) => {
      holder.on('close', () => resolve());
      holder.stdin.end();
    });
}

t.test(
  "--installed after waiting for the lock works on what the unit runs then: another run's switch is followed, an image loaded meanwhile is not loaded again",
  async (t) => {
    const node = await upgradedThenWiped(t);
    // the lock's holder (switch-guard's rollback, say) points the unit back at 0.9.0, not in storage either
    let release = await holdLock(node);
    let run = installedWaitingForLock(node);
    await run.waiting;
    await pointAt(node, first);
    await release();
    let r = await run.done;
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.stderr,
      /the agent image localhost\/offline-bundle\/bundle-agent@sha256:[0-9a-f]{64} is not in storage \(after an unclean shutdown CRI-O wipes the store podman shares\): loaded bundle-agent 0\.9\.0 again/,
      'the image the unit runs now, from its kept pair',
    );
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}@${newer.manifest}`),
      undefined,
      'not the one the unit ran before the wait',
    );
    // the holder loads what it points the unit at: nothing left to do
    wipe(node);
    await pointAt(node, first);
    release = await holdLock(node);
    run = installedWaitingForLock(node);
    await run.waiting;
    await selfUpgrade(node, newer);
    await release();
    r = await run.done;
    t.equal(r.code, 0, r.stderr);
    t.equal(r.stderr, '', 'nothing loaded, nothing said');
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`),
      undefined,
      'the kept 0.9.0 not loaded',
    );
  },
);

t.test(
  'a kept pair damaged since (a byte changed, an archive cut to nothing) is kept again from a stick with that agent',
  async (t) => {
    const node = await installedNode(t);
    const archive = path.join(node.root, KEPT, path.basename(first.archive));
    const original = await readFile(first.archive);
    await plug(node, first);
    for (const [how, damage] of [
      ['a byte changed', () => flipByte(archive)],
      ['cut to nothing', () => truncate(archive, 0)],
    ] as const) {
      await damage();
      const r = await runBootstrap(node);
      t.equal(r.code, 0, r.stderr);
      t.match(
        r.stderr,
        /the kept pair .*bundle-agent-0\.9\.0-amd64\.oci\.tar is damaged \(its archive (does not hash|has 0 bytes)/,
        `${how}: said`,
      );
      t.equal(
        (await readFile(archive)).equals(original),
        true,
        `${how}: the kept archive is whole again`,
      );
    }
    const again = await runBootstrap(node);
    t.notMatch(again.stderr, /kept bundle-agent|damaged/, 'whole: not kept again');
  },
);

t.test(
  '--installed fails the start (255: Restart= tries again) on a wait for the lock over 60 s and on a full disk; skips it (1) when nothing can load the image',
  { skip: process.getuid?.() !== 0 && 'needs root (mount)' },
  async (t) => {
    const node = await installedNode(t);
    wipe(node);
    const release = await holdLock(node);
    const started = Date.now();
    const r = await installed(node);
    await release();
    t.equal(r.code, 255, r.stderr);
    t.ok(
      Date.now() - started >= 59_000 && Date.now() - started < 90_000,
      `waited ~60 s (${Date.now() - started} ms)`,
    );
    t.match(
      r.stderr,
      /^bundle-agent-bootstrap: the agent image \S+ is not in storage, and loading it again from the copy kept in \S+ has to wait: another bootstrap holds \S+ for 60 s: giving up: bundle-agent's start fails, and Restart= tries again\n$/,
    );
    const small = path.join(path.dirname(node.root), 'small-work');
    await mkdir(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', small]);
    t.teardown(() => {
      execFileSync('umount', [small]);
    });
    const full = await runBootstrap({ ...node, work: small }, ['--installed']);
    t.equal(full.code, 255, full.stderr);
    t.match(
      full.stderr,
      /bytes free, \d+ needed for the agent image.*: bundle-agent's start fails, and Restart= tries again/,
    );
    t.equal((await installed(node)).code, 0, 'with room: loaded again');
    await rm(path.join(node.root, KEPT), { recursive: true });
    wipe(node);
    const none = await installed(node);
    t.equal(none.code, 1, 'nothing kept: skipped until a stick brings it');
    t.match(none.stderr, /is not in storage yet: bundle-agent waits for a stick/);
  },
);

t.test(
  'an unconfirmed self-upgrade: the pair it goes back to stays kept until the switch is confirmed',
  async (t) => {
    const node = await installedNode(t);
    await plug(node, newer);
    t.equal((await runBootstrap(node)).code, 0);
    await selfUpgrade(node, newer);
    const pending = path.join(node.root, 'var/lib/bundle-agent/agent-switch.pending');
    await writeFile(pending, `${newer.manifest}\n600\n${AGENT_REPOSITORY}@${first.manifest}\n`);
    let r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.strictSame(
      await kept(node),
      [...names(first), ...names(newer)].sort(),
      'the rollback target kept while the switch is pending',
    );
    await rm(pending);
    r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.strictSame(await kept(node), names(newer), 'confirmed: only the pair the unit runs');
  },
);
