// deploy/openshift/bundle-agent-bootstrap.sh, run directly (bash) as a node with no agent and no
// registry would run it: the sidecar `bundle create --agent-image` wrote, on "sticks" (directories,
// a loop-mounted ext4 image for the pulled stick), checked with the real openssl, loaded with the
// real skopeo into a containers-storage under a temp root (vfs), disk full on real tmpfs mounts.
// Without systemd (--no-start): the booted-node test runs the same script under systemd.
// The second half; bootstrap.test.ts has the first, bootstrap-setup.ts what both share.
import t from 'tap';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  chmod,
  copyFile,
  mkdir,
  readFile,
  readdir,
  rm,
  truncate,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import { startContainerd } from '../helpers/containerd.mjs';
import {
  AGENT_REPOSITORY,
  makeSidecar,
  BOOTSTRAP,
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
  other,
  good,
  arm,
  nodeDir,
  plug,
  unplug,
  nothingLoaded,
  loadsGood,
  ISSUE,
} from './bootstrap-setup.js';

const older = await makeSidecar(work, ecdsa, { version: '0.8.0' });
const release = await makeSidecar(work, ecdsa, { version: '1.0.0' });
const candidate = await makeSidecar(work, ecdsa, { version: '1.0.0-rc.1' });
// the version the test node's unit's default Image= is tagged with (lib.ts unitFiles: …:0.1.0)
const first = await makeSidecar(work, ecdsa, { version: '0.1.0' });
const otherSigned = await makeSidecar(work, other, { version: '0.9.2' });

t.test(
  'k3s / RKE2 / containerd (--containerd SOCKET): verified, imported into k8s.io under the name the DaemonSet uses, by the signed digest; again: nothing to do',
  { skip: process.getuid?.() !== 0 && 'needs root (containerd)' },
  async (t) => {
    const ctd = await startContainerd();
    t.teardown(() => ctd.stop());
    const ls = () =>
      execFileSync('ctr', ['--address', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], {
        encoding: 'utf8',
      })
        .split('\n')
        .slice(1)
        .filter(Boolean)
        .map((l) => l.split(/\s+/));
    const node = await makeNode(await nodeDir(), other, { unit: 'none' });
    await plug(node, good);
    const refused = await runBootstrap(node, ['--containerd', ctd.socket]);
    t.equal(refused.code, 1);
    t.match(refused.console ?? '', /not signed by this cluster's key/);
    t.strictSame(ls(), [], 'nothing imported');
    await writeKey(node, ecdsa);
    // a second stick with an older agent the DaemonSet pins (image: …:0.8.0): --want-version imports that one
    await plug(node, older, { name: 'sdc1' });
    const pinned = await runBootstrap(node, [
      '--containerd',
      ctd.socket,
      '--want-version',
      '0.8.0',
    ]);
    t.equal(pinned.code, 0, pinned.stderr);
    t.strictSame(
      ls()
        .map((i) => i[0])
        .filter((ref) => !ref!.startsWith('sha256:')),
      [`${AGENT_REPOSITORY}:0.8.0`],
      'the version the DaemonSet names, not the newest',
    );
    const r = await runBootstrap(node, ['--containerd', ctd.socket]);
    t.equal(r.code, 0, r.stderr);
    const images = ls();
    t.strictSame(
      images
        .map((i) => [i[0], i[2]])
        .filter(([ref]) => !ref!.startsWith('sha256:') && !ref!.endsWith(':0.8.0')),
      [[`${AGENT_REPOSITORY}:0.9.0`, good.manifest]],
      'named localhost/offline-bundle/bundle-agent:0.9.0, the signed manifest digest',
    );
    t.equal(r.dropIn, undefined, 'no unit drop-in on k3s');
    t.equal(
      r.console,
      ISSUE(
        "The agent image (bundle-agent 0.9.0) was imported from the USB stick; the agent's pod starts if the DaemonSet names this version",
      ),
      'no promise of a start it cannot know',
    );
    const again = await runBootstrap(node, ['--containerd', ctd.socket]);
    t.equal(again.code, 0);
    t.match(again.stderr, /is already in containerd: nothing to do/);
  },
);

/** A statement signed with the factory's ECDSA key by openssl, as `bundle create` would sign one, with fields of our choosing. */
async function signedStatement(dir: string, fields: Record<string, string>): Promise<void> {
  const lines = [
    'offline-bundle-agent-image 1',
    ...Object.entries(fields).map(([k, v]) => `${k} ${v}`),
  ]
    .map((l) => `${l}\n`)
    .join('');
  const signed = path.join(dir, 'signed.tmp');
  await writeFile(signed, lines);
  const sig = execFileSync('openssl', ['dgst', '-sha256', '-sign', ecdsa.key, signed]);
  await rm(signed);
  await writeFile(
    path.join(dir, `bundle-agent-${fields.version ?? 'x'}-amd64.oci.tar.sig`),
    `${lines}signature ${sig.toString('base64')}\n`,
  );
}

t.test(
  'signed but out of bounds: an archive over 4 GiB, a file name with a path, a repeated field; each refused before any read of an archive',
  async (t) => {
    const text = await readFile(good.statement, 'utf8');
    const field = (k: string) => new RegExp(`^${k} (.*)$`, 'm').exec(text)![1]!;
    const base = {
      file: path.basename(good.archive),
      size: field('size'),
      sha256: field('sha256'),
      manifest: field('manifest'),
      image: field('image'),
      version: field('version'),
      arch: 'amd64',
      signer: field('signer'),
    };
    const cases: [string, Record<string, string>, RegExp][] = [
      [
        'over 4 GiB',
        { ...base, size: '5000000000' },
        /size 5000000000 is over the 4294967296 bytes an agent image may have/,
      ],
      ['a size of 13 digits', { ...base, size: '1000000000000' }, /a field is malformed/],
      [
        'a path in file',
        { ...base, file: '../../etc/bundle-agent-0.9.0-amd64.oci.tar' },
        /a field is malformed/,
      ],
      [
        "an image name not the agent's",
        { ...base, image: 'quay.io/evil/agent:0.9.0' },
        /a field is malformed/,
      ],
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
      t.equal(
        r.console,
        ISSUE('The agent image on the USB stick is damaged: copy it from the factory again'),
        `${what}: the console line`,
      );
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
  },
);

t.test('a field given twice (signed): not a statement this bootstrap reads', async (t) => {
  const node = await makeNode(await nodeDir(), ecdsa);
  const dir = path.join(node.media, 'bundle-agent', 'sdb1');
  await mkdir(dir, { recursive: true });
  const text = await readFile(good.statement, 'utf8');
  const signed = text.split('\n').slice(0, -2).join('\n') + '\narch arm64\n';
  await writeFile(path.join(dir, 's.tmp'), signed);
  const sig = execFileSync('openssl', [
    'dgst',
    '-sha256',
    '-sign',
    ecdsa.key,
    path.join(dir, 's.tmp'),
  ]);
  await rm(path.join(dir, 's.tmp'));
  await writeFile(
    path.join(dir, path.basename(good.statement)),
    `${signed}signature ${sig.toString('base64')}\n`,
  );
  await copyFile(good.archive, path.join(dir, path.basename(good.archive)));
  const r = await runBootstrap(node);
  t.equal(r.code, 1);
  t.match(
    r.stderr,
    /signed, but not a statement this bootstrap reads \(format or a field missing or repeated\)/,
  );
  await nothingLoaded(t, node, r);
});

t.test(
  'a statement named with a newline and an escape sequence: one journal line, no control character on the console',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = path.join(node.media, 'bundle-agent', 'sdb1');
    await mkdir(dir, { recursive: true });
    await writeFile(
      path.join(dir, 'bundle-agent-1\n\u001b[2J-amd64.oci.tar.sig'),
      'offline-bundle-agent-image 1\nsignature AAAA\n',
    );
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(r.stderr.trim().split('\n').length, 1, `one line: ${JSON.stringify(r.stderr)}`);
    t.notMatch(r.stderr.trim(), /[\u0000-\u001f]/, 'no control character in the journal line');
    t.notMatch(r.console ?? '', /[\u0000-\u0009\u000b-\u001f]/, 'none on the console');
    await nothingLoaded(t, node, r);
  },
);

t.test(
  'a mount point made before its stick is mounted (systemd-mount makes the directory first): waited for, then loaded',
  { skip: process.getuid?.() !== 0 && 'needs root (mount)' },
  async (t) => {
    const d = await nodeDir();
    const node = await makeNode(d, ecdsa);
    // the stick's files, outside the media root until mounted there
    const stick = path.join(d, 'stick');
    await mkdir(stick);
    for (const f of [good.statement, good.archive, good.bundle])
      await copyFile(f, path.join(stick, path.basename(f)));
    const mnt = path.join(node.media, 'bundle-agent', 'sdb1');
    await mkdir(mnt, { recursive: true });
    const child = spawn(
      '/bin/bash',
      [
        BOOTSTRAP,
        '--media',
        node.media,
        '--keys',
        node.keys,
        '--root',
        node.root,
        '--work',
        node.work,
        '--storage',
        node.storage,
        '--no-start',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    // the mount comes once the script says it waits for it: no sleep in the test
    const waiting = new Promise<void>((resolve) =>
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (stderr.includes(`waiting for ${mnt} to be mounted`)) resolve();
      }),
    );
    const done = new Promise<number | null>((resolve) => child.on('close', resolve));
    await Promise.race([waiting, done]);
    t.match(
      stderr,
      /waiting for .*sdb1 to be mounted \(10 s at most\)/,
      'it waits for the empty mount point',
    );
    execFileSync('mount', ['--bind', '-o', 'ro', stick, mnt]);
    t.teardown(() => {
      spawnSync('umount', [mnt]);
    });
    t.equal(await done, 0, stderr);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`),
      good.manifest,
      'loaded from the stick mounted meanwhile',
    );
  },
);

t.test(
  'a stick mounted one level down (--media /mnt, the stick at /mnt/usb) with an empty lost+found: not waited on (#40 item 8)',
  { skip: process.getuid?.() !== 0 && 'needs root (mount)' },
  async (t) => {
    const d = await nodeDir();
    const node = await makeNode(d, ecdsa);
    const stick = path.join(d, 'stick-ext4');
    await mkdir(path.join(stick, 'lost+found'), { recursive: true });
    for (const f of [good.statement, good.archive, good.bundle])
      await copyFile(f, path.join(stick, path.basename(f)));
    const mnt = path.join(node.media, 'usb');
    await mkdir(mnt, { recursive: true });
    execFileSync('mount', ['--bind', '-o', 'ro', stick, mnt]);
    t.teardown(() => {
      spawnSync('umount', [mnt]);
    });
    const began = Date.now();
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.notMatch(
      r.stderr,
      /waiting for .* to be mounted/,
      "the stick's own lost+found is not a mount point to wait for",
    );
    t.ok(Date.now() - began < 9_000, `no 10 s wait (${Date.now() - began} ms)`);
    t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), good.manifest, 'loaded');
  },
);

t.test(
  'stopped (SIGTERM to every process of the run, as systemctl stop and TimeoutStartSec= send it) while skopeo unpacks: exit 143, no image, no copy, none of skopeo\'s temporary files, the console no longer says "Loading"; the next run loads',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    await plug(node, good);
    const child = spawn(
      '/bin/bash',
      [
        BOOTSTRAP,
        '--media',
        node.media,
        '--keys',
        node.keys,
        '--root',
        node.root,
        '--work',
        node.work,
        '--storage',
        node.storage,
        '--no-start',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const done = new Promise<number | null>((resolve) =>
      child.on('close', (code, signal) => resolve(code ?? (signal ? -1 : null))),
    );
    // stop once skopeo has made its temporary directories (oci-archive unpacking): in the run's own
    // directory under --work (skopeo 1.9 ignores TMPDIR: without --tmpdir they go to /var/tmp and stay there)
    const skopeoDirs = async () =>
      (
        await Promise.all(
          (await readdir(node.work)).map((d) =>
            readdir(path.join(node.work, d)).catch(() => [] as string[]),
          ),
        )
      )
        .flat()
        .filter((f) => /^(oci|storage)\d+$/.test(f));
    let exited = false;
    void done.then(() => {
      exited = true;
    });
    while (!exited && (await skopeoDirs()).length === 0) await new Promise((r) => setImmediate(r));
    t.notOk(exited, "skopeo was unpacking into the run's directory under --work when stopped");
    process.kill(-child.pid!, 'SIGTERM');
    t.equal(await done, 143, stderr);
    t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), undefined, 'no image');
    t.strictSame(await workLeftovers(node), [], 'no copy left');
    t.strictSame(
      await readdir(node.work),
      [],
      "nothing of skopeo's left: its directories were inside the run's",
    );
    t.equal(
      await readFile(path.join(node.root, 'run/issue.d/bundle-agent.issue'), 'utf8'),
      ISSUE(
        'Loading the agent was stopped before it finished: nothing was loaded; plug the USB stick in again',
      ),
    );
    t.match(stderr, /stopped while loading the agent image: nothing was loaded/);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.equal(await storedDigest(node, `${AGENT_REPOSITORY}:0.9.0`), good.manifest);
    t.equal((await storeContents(node)).images.length, 1);
  },
);

t.test(
  'several agents on the sticks: the highest SIGNED version (semver) is loaded, whatever the file names and stick order say',
  async (t) => {
    // sdb1 0.9.0, sdc1 0.8.0: by path the older one sorts last
    const node = await makeNode(await nodeDir(), ecdsa);
    await plug(node, good, { name: 'sdb1' });
    await plug(node, older, { name: 'sdc1' });
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.dropIn ?? '',
      new RegExp(`^Image=${AGENT_REPOSITORY}@${good.manifest}$`, 'm'),
      '0.9.0 over 0.8.0',
    );
    t.match(r.stderr, /chose bundle-agent 0\.9\.0 .*the newest signed one of/);
    t.equal(
      await storedDigest(node, `${AGENT_REPOSITORY}:0.8.0`),
      undefined,
      'the older one not loaded',
    );
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
    t.match(
      r2.dropIn ?? '',
      new RegExp(`^Image=${AGENT_REPOSITORY}@${release.manifest}$`, 'm'),
      '1.0.0 over 1.0.0-rc.1 and over a 0.8.0 named 9.9.9',
    );
  },
);

t.test(
  'the newest signed agent with a damaged archive: that fault is reported, no silent fall back to an older one',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const dir = await plug(node, good, { name: 'sdb1' });
    await plug(node, older, { name: 'sdc1' });
    await truncate(path.join(dir, path.basename(good.archive)), 1000);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE('The agent image on the USB stick is incomplete (a copy cut short?): copy it again'),
    );
    await nothingLoaded(t, node, r);
  },
);

t.test(
  "never older than the unit's own Image= tag (the agent would switch back to that image, which the node lacks)",
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const unit = path.join(node.root, 'etc/containers/systemd/bundle-agent.container');
    await writeFile(
      unit,
      (await readFile(unit, 'utf8')).replace(/^Image=.*$/m, `Image=${AGENT_REPOSITORY}:0.8.5`),
    );
    await plug(node, older);
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.match(
      r.stderr,
      /bundle-agent 0\.8\.0 is older than the unit's own image \(localhost\/offline-bundle\/bundle-agent:0\.8\.5 in \/etc\/containers\/systemd\/bundle-agent\.container\): bring bundle-agent 0\.8\.5 or newer/,
    );
    t.equal(
      r.console,
      ISSUE(
        'The agent on the USB stick (0.8.0) is older than this node needs (0.8.5): bring a newer one',
      ),
    );
    await nothingLoaded(t, node, r);
    await loadsGood(t, node);
  },
);

t.test(
  'several statements, none loadable: the console gives the reason of the one that came closest, not of the last one tried',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    await plug(node, arm, { name: 'sdc1' });
    const junk = path.join(node.media, 'bundle-agent', 'sdb1');
    await mkdir(junk, { recursive: true });
    await writeFile(path.join(junk, 'bundle-agent-0.0.1-amd64.oci.tar.sig'), 'junk\n');
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.equal(
      r.console,
      ISSUE(
        'The agent image on the USB stick is for arm64, this node is amd64: bring the amd64 one',
      ),
    );
    t.match(
      r.stderr,
      /none of the 2 agent image statements can be loaded; the closest: .*is for arm64/,
    );
  },
);

t.test(
  'at most 32 statements are read: 40 junk ones cost 32 checks and one line saying so',
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const junk = path.join(node.media, 'bundle-agent', 'sdb1');
    await mkdir(junk, { recursive: true });
    for (let i = 0; i < 40; i++)
      await writeFile(
        path.join(junk, `bundle-agent-0.0.${i}-amd64.oci.tar.sig`),
        'offline-bundle-agent-image 1\nsignature AAAA\n',
      );
    const r = await runBootstrap(node);
    t.equal(r.code, 1);
    t.match(
      r.stderr,
      /40 agent image statements on the media: only the first 32 \(by path\) are read/,
    );
    t.equal(
      (r.stderr.match(/^bundle-agent-bootstrap: \/.*does not verify/gm) ?? []).length,
      32,
      '32 signature checks',
    );
    t.equal(
      r.console,
      ISSUE(
        "The agent image on the USB stick is not signed by this cluster's key: nothing was loaded",
      ),
    );
  },
);

t.test(
  "trust as the agent's: the keys of config.yaml trust.keys only (not every *.pub beside them); a key others could change, or none, refuses",
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa);
    const config = path.join(node.root, 'etc/bundle-agent/config.yaml');
    await writeFile(
      config,
      'root: /\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]   # the factory\nversion:\n  current: "1.0.0"\n',
    );
    await writeKey(node, other, 'other.pub');
    await plug(node, otherSigned);
    const r = await runBootstrap(node, [], { keys: 'config' });
    t.equal(r.code, 1);
    t.match(
      r.stderr,
      /does not verify with any trusted key \(.*\/etc\/bundle-agent\/keys\/factory\.pub, from trust\.keys of .*config\.yaml\)/,
      'other.pub is in the directory but not in trust.keys',
    );
    await nothingLoaded(t, node, r);
    // the block form, with the other key listed: trusted
    await writeFile(
      config,
      'trust:\n  keys:\n    - "/etc/bundle-agent/keys/other.pub"\n    - \'/etc/bundle-agent/keys/factory.pub\'\n',
    );
    const ok = await runBootstrap(node, [], { keys: 'config' });
    t.equal(ok.code, 0, ok.stderr);
    // group-writable: refused as the agent refuses it
    const node2 = await makeNode(await nodeDir(), ecdsa);
    await writeFile(
      path.join(node2.root, 'etc/bundle-agent/config.yaml'),
      'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n',
    );
    await chmod(path.join(node2.keys, 'factory.pub'), 0o664);
    await plug(node2, good);
    const unsafe = await runBootstrap(node2, [], { keys: 'config' });
    t.equal(unsafe.code, 1);
    t.match(
      unsafe.stderr,
      /trusted key .*factory\.pub is writable by its group \(mode 664\): chmod go-w .*factory\.pub \(the agent refuses it too\)/,
    );
    t.equal(
      unsafe.console,
      ISSUE(
        "The node's trusted key could be changed by others: nothing was loaded (see journalctl -u bundle-agent-bootstrap)",
      ),
    );
    await nothingLoaded(t, node2, unsafe);
    // no key at all: said so, not "not signed by this cluster's key"
    const node3 = await makeNode(await nodeDir(), ecdsa);
    await rm(path.join(node3.keys, 'factory.pub'));
    await plug(node3, good);
    const none = await runBootstrap(node3);
    t.equal(none.code, 1);
    t.match(none.stderr, /no trusted key configured/);
    t.equal(
      none.console,
      ISSUE(
        'No trusted key is configured on this node: nothing was loaded (see journalctl -u bundle-agent-bootstrap)',
      ),
    );
    await writeFile(path.join(node3.root, 'etc/bundle-agent/config.yaml'), 'trust:\n  keys: []\n');
    t.match(
      (await runBootstrap(node3, [], { keys: 'config' })).stderr,
      /no trusted key configured \(trust\.keys of .* is empty\)/,
    );
  },
);

t.test(
  "plain unit (podman before 4.4), README's upgrade as written: the first agent tagged like the unit's default Image= (0.1.0), then a stick with 0.9.0 and bundle-agent-bootstrap.sh --upgrade",
  async (t) => {
    const node = await makeNode(await nodeDir(), ecdsa, { unit: 'plain' });
    await plug(node, first);
    const r = await runBootstrap(node);
    t.equal(r.code, 0, r.stderr);
    t.match(
      r.dropIn ?? '',
      new RegExp(`^Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${first.manifest}$`, 'm'),
    );
    t.notMatch(r.dropIn ?? '', /The agent replaces/, "the plain unit's agent does not replace it");
    t.match(r.dropIn ?? '', /--upgrade replaces this file/);
    await unplug(node);
    await plug(node, good);
    t.match(
      (await runBootstrap(node)).stderr,
      /is installed: nothing to do \(a newer agent from a stick: --upgrade\)/,
      'a plain run leaves the running agent alone',
    );
    const up = await runBootstrap(node, ['--upgrade']);
    t.equal(up.code, 0, up.stderr);
    t.match(
      up.dropIn ?? '',
      new RegExp(`^Environment=BUNDLE_AGENT_IMAGE=${AGENT_REPOSITORY}@${good.manifest}$`, 'm'),
      'now 0.9.0, by digest',
    );
    t.equal(
      up.console,
      ISSUE('The agent (bundle-agent 0.9.0) was loaded from the USB stick and is starting'),
    );
    const again = await runBootstrap(node, ['--upgrade']);
    t.equal(again.code, 0, again.stderr);
    t.match(again.stderr, /is bundle-agent 0\.9\.0, the newest on the stick: nothing to do/);
    // an older stick never downgrades it
    await unplug(node);
    await plug(node, older);
    const down = await runBootstrap(node, ['--upgrade']);
    t.equal(down.code, 1);
    t.match(down.stderr, /bundle-agent 0\.8\.0 is older than the installed agent \(0\.9\.0/);
    t.match(down.dropIn ?? '', new RegExp(good.manifest), 'still 0.9.0'); // the Quadlet agent's drop-in is its own (switch and rollback): --upgrade refuses it
    const quadlet = await makeNode(await nodeDir(), ecdsa);
    await plug(quadlet, good);
    const refused = await runBootstrap(quadlet, ['--upgrade']);
    t.equal(refused.code, 2);
    t.match(refused.stderr, /--upgrade is for the plain unit/);
    t.equal(refused.dropIn, undefined);
  },
);
