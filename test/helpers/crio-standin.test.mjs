// Contract tests of the CRI-O stand-in (test/helpers/crio-standin.mjs): the CRI-O behaviour
// offline-bundle depends on, shown through the agent's own CRI client against a real
// docker-registry, with skopeo doing the copies. CRI-O cannot run here; these tests pin down
// what the stand-in promises, so tests built on it test the agent against CRI-O's semantics:
// config read at start and on SIGHUP only, mirrors per containers-registries.conf(5),
// pinned_images per crio.conf(5), a store that survives restarts.
import t from 'tap';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  CriImageClient,
  reloadRuntime,
  writeRegistriesDropIn,
  writePinsDropIn,
} from '@offline-bundle/runtime';
import { mirrorPath } from '@offline-bundle/oci';
import { startCrioStandin } from './crio-standin.mjs';
import { pushImage } from './images.mjs';
import { startRegistry } from './registry.mjs';
import { tmpdir } from './tmp.mjs';

// The images' "real" home: a host that never resolves, so only a mirror can serve them.
const ORIGIN = 'origin.offline-bundle.invalid';
const APP = `${ORIGIN}/acme/app`;
const TOOL = `${ORIGIN}/acme/tool`;
const DB = `${ORIGIN}/data/db`;
const PULL_TIMEOUT = 120_000; // a loaded 2-core machine: generous

const reg = await startRegistry({ timeoutMs: 30_000 });
t.teardown(() => reg.stop());

/** Push a one-layer image to the registry at the path the agent's mirror drop-in uses. */
async function push(
  /** @type {string} */ repo,
  /** @type {string} */ tag,
  /** @type {string} */ content,
  index = false,
) {
  const img = await pushImage(
    {
      tag,
      index,
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'content.txt': content }] }],
    },
    `${reg.host}/${mirrorPath(repo)}:${tag}`,
  );
  return { ...img, tagRef: `${repo}:${tag}`, digestRef: `${repo}@${img.digest}` };
}
const app = await push(APP, 'v1', 'app v1', true); // a multi-arch index, as releases ship
const tool = await push(TOOL, 'v2', 'tool v2');
const db = await push(DB, 'v3', 'db v3');

/** Node config paths under a fresh temp dir, dirs created, registries.conf without mirrors. */
async function node(/** @type {any} */ t) {
  const dir = await tmpdir(t, 'ob-crio-contract-');
  const n = {
    dir,
    state: path.join(dir, 'state'),
    registriesConf: path.join(dir, 'registries.conf'),
    registriesDropInDir: path.join(dir, 'registries.conf.d'),
    crioConf: path.join(dir, 'crio.conf'),
    crioDropInDir: path.join(dir, 'crio.conf.d'),
  };
  await mkdir(n.registriesDropInDir);
  await mkdir(n.crioDropInDir);
  await writeFile(n.registriesConf, 'unqualified-search-registries = []\n');
  await writeFile(n.crioConf, '[crio]\n[crio.image]\n');
  return n;
}

/** The agent's own CRI client on the stand-in's socket, closed at teardown. */
function client(/** @type {any} */ t, /** @type {string} */ socket) {
  const c = new CriImageClient(socket, { callTimeoutMs: 30_000 });
  t.teardown(() => c.close());
  return c;
}

/** The agent's mirror drop-in (its own renderer): every repository to the test registry. */
const mirrorDropIn = (/** @type {string} */ dir, digestOnly = true) =>
  writeRegistriesDropIn(dir, '50-offline-bundle-mirror.conf', {
    mirror: reg.host,
    repositories: [APP, TOOL, DB].map((repository) => ({ repository, digestOnly })),
  });

/** pinned per image (keyed by the first repo tag or digest) from ListImages. */
async function pinnedMap(/** @type {CriImageClient} */ c) {
  /** @type {Record<string, boolean>} */
  const out = {};
  for (const i of await c.listImages()) {
    for (const name of [...i.repoTags, ...i.repoDigests]) {
      const repo = [APP, TOOL, DB].find(
        (r) => name.startsWith(`${r}:`) || name.startsWith(`${r}@`),
      );
      if (repo) out[repo] = i.pinned;
    }
  }
  return out;
}

t.test(
  'contract (CRI-O stand-in): a mirror drop-in counts only from the SIGHUP after it is written',
  async (t) => {
    const n = await node(t);
    const crio = await startCrioStandin(t, { ...n, dir: n.state });
    const c = client(t, crio.socket);

    await mirrorDropIn(n.registriesDropInDir);
    // No reload yet: CRI-O still has the config it read at start, so only the origin is tried.
    await t.rejects(
      c.pullImage(app.digestRef, { timeoutMs: PULL_TIMEOUT }),
      {
        code: 'PULL_FAILED',
        message: new RegExp(`${ORIGIN.replace(/\./g, '\\.')}.*(no such host|lookup)`),
      },
      'before SIGHUP the drop-in is not used: the pull goes to the (unresolvable) origin and fails',
    );
    let pulls = (await crio.events()).filter((e) => e.event === 'pull');
    t.same(
      pulls.map((e) => [e.source, e.outcome]),
      [[app.digestRef, 'failed']],
      'one attempt, at the origin, no mirror',
    );

    // The agent's reload: `kill -HUP <pid>` (systemctl reload crio) returns before the reload is done.
    await reloadRuntime(crio.reloadCommand);
    const reload = await crio.waitForEvent((e) => e.event === 'reload');
    t.equal(reload.outcome, 'ok');
    t.ok(
      reload.files.includes(path.join(n.registriesDropInDir, '50-offline-bundle-mirror.conf')),
      'the reload read the drop-in',
    );

    const id = await c.pullImage(app.digestRef, { timeoutMs: PULL_TIMEOUT });
    const config =
      app.manifests.find((/** @type {any} */ m) => m.platform.architecture === 'amd64')?.config ??
      '';
    t.equal(
      id,
      config.replace(/^sha256:/, ''),
      'image_ref is the image ID: the config digest hex, as CRI-O reports it',
    );
    pulls = (await crio.events()).filter((e) => e.event === 'pull');
    t.match(
      pulls.at(-1),
      {
        ref: app.digestRef,
        source: `${reg.host}/${mirrorPath(APP)}@${app.digest}`,
        mirror: true,
        outcome: 'ok',
      },
      'after SIGHUP the same pull is served by the mirror',
    );
    const events = await crio.events();
    t.ok(
      events.findIndex((e) => e.event === 'reload') <
        events.findIndex((e) => e.event === 'pull' && e.outcome === 'ok'),
      'the event log orders the reload before the pull',
    );

    const st = await c.imageStatus(app.digestRef);
    t.equal(st?.id, id);
    t.ok(
      st?.repoDigests.includes(app.digestRef),
      "stored under the requested name (the origin), not the mirror's",
    );
    t.same(st?.repoTags, [], 'a digest pull adds no tag');
    t.ok(st && st.size > 0);

    // pull-from-mirror = "digest-only": a tag reference skips the mirror.
    await t.rejects(
      c.pullImage(app.tagRef, { timeoutMs: PULL_TIMEOUT }),
      { code: 'PULL_FAILED' },
      'digest-only mirror: a tag pull goes to the origin',
    );
    t.equal((await crio.events()).filter((e) => e.event === 'pull').at(-1).source, app.tagRef);

    // Removing the drop-in changes nothing until the next SIGHUP either.
    await rm(path.join(n.registriesDropInDir, '50-offline-bundle-mirror.conf'));
    t.equal(
      await c.pullImage(tool.digestRef, { timeoutMs: PULL_TIMEOUT }),
      tool.manifests[0].config.replace(/^sha256:/, ''),
      'removed drop-in: still mirrored until SIGHUP',
    );
    t.equal((await crio.reload()).outcome, 'ok');
    await t.rejects(
      c.pullImage(db.digestRef, { timeoutMs: PULL_TIMEOUT }),
      { code: 'PULL_FAILED' },
      'after SIGHUP the mirror is gone',
    );
    t.equal(await c.imageStatus(db.digestRef), null, 'ImageStatus: no image');
  },
);

t.test(
  'contract (CRI-O stand-in): mirrors per containers-registries.conf(5): order, tag pulls, later drop-in wins',
  async (t) => {
    const n = await node(t);
    // A dead mirror first, then the registry (pull-from-mirror "all"): both tried in order.
    await writeFile(
      path.join(n.registriesDropInDir, '10-site.conf'),
      [
        '[[registry]]',
        `prefix = "${ORIGIN}/acme"`,
        `location = "${ORIGIN}/acme"`,
        '[[registry.mirror]]',
        'location = "127.0.0.1:1/dead"',
        'insecure = true',
        '[[registry.mirror]]',
        `location = "${reg.host}/${ORIGIN}/acme"`,
        'insecure = true',
        '',
      ].join('\n'),
    );
    const crio = await startCrioStandin(t, { ...n, dir: n.state });
    const c = client(t, crio.socket);
    await c.pullImage(tool.tagRef, { timeoutMs: PULL_TIMEOUT });
    const pulls = (await crio.events()).filter((e) => e.event === 'pull');
    t.same(
      pulls.map((e) => [e.source, e.outcome]),
      [
        [`127.0.0.1:1/dead/tool:v2`, 'failed'],
        [`${reg.host}/${ORIGIN}/acme/tool:v2`, 'ok'],
      ],
      'mirrors in order, the prefix rewritten to each location; a tag pull uses mirrors without pull-from-mirror',
    );
    const st = await c.imageStatus(tool.tagRef);
    t.same(st?.repoTags, [tool.tagRef]);
    t.same(
      st?.repoDigests,
      [`${TOOL}@${tool.digest}`],
      "repo digest synthesised from the tag's repository and the manifest digest",
    );

    // A longer prefix in a later drop-in wins for its repository; others keep the site entry.
    await mirrorDropIn(n.registriesDropInDir, true);
    await crio.reload();
    await t.rejects(
      c.pullImage(tool.tagRef, { timeoutMs: PULL_TIMEOUT }),
      { code: 'PULL_FAILED', message: /origin\.offline-bundle\.invalid/ },
      "the longest prefix (the agent's digest-only entry) decides: the tag pull skips its mirror",
    );
    t.equal((await crio.events()).filter((e) => e.event === 'pull').at(-1).source, tool.tagRef);

    // A bad drop-in aborts the reload: the mirrors read before stay in effect.
    await writeFile(path.join(n.registriesDropInDir, '99-broken.conf'), '[[registry]\nprefix = ');
    const bad = await crio.reload();
    t.equal(bad.outcome, 'error');
    t.match(bad.error, /99-broken\.conf/);
    await c.pullImage(app.digestRef, { timeoutMs: PULL_TIMEOUT });
    t.equal(
      (await crio.events()).filter((e) => e.event === 'pull').at(-1).source,
      `${reg.host}/${mirrorPath(APP)}@${app.digest}`,
      'old mirrors kept after the failed reload',
    );
  },
);

t.test(
  'contract (CRI-O stand-in): pinned_images exact/glob/keyword, applied on SIGHUP, a later drop-in replaces the list',
  async (t) => {
    const n = await node(t);
    await mirrorDropIn(n.registriesDropInDir, false);
    const crio = await startCrioStandin(t, { ...n, dir: n.state });
    const c = client(t, crio.socket);
    // Concurrent pulls, as the agent's pullAll does them (the same image twice included).
    await Promise.all(
      [app.digestRef, tool.tagRef, db.tagRef, app.digestRef].map((r) =>
        c.pullImage(r, { timeoutMs: PULL_TIMEOUT }),
      ),
    );
    t.equal((await c.listImages()).length, 3, 'three images, the duplicate pull stored once');
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: false, [DB]: false },
      'nothing pinned at first',
    );

    const pins = (/** @type {string} */ file, /** @type {string[]} */ list) =>
      writeFile(
        path.join(n.crioDropInDir, file),
        `[crio.image]\npinned_images = ${JSON.stringify(list)}\n`,
      );
    // exact (the whole name), glob (trailing *), and an exact name that is only a prefix
    await pins('10-pins.conf', [app.digestRef, `${ORIGIN}/acme/to*`, `${ORIGIN}/data/db`]);
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: false, [DB]: false },
      'written but not reloaded: no change',
    );
    t.equal((await crio.reload()).outcome, 'ok');
    t.same(
      await pinnedMap(c),
      { [APP]: true, [TOOL]: true, [DB]: false },
      'after SIGHUP: exact digest name and glob pin; an exact pattern must match the whole name (no tag: no match)',
    );
    t.equal(
      (await c.imageStatus(app.digestRef))?.pinned,
      true,
      'ImageStatus reports pinned too (CRI-O >= 1.29.7)',
    );

    // keyword (*kw*) in a later file: it replaces the earlier list, it does not add to it
    await pins('20-pins', ['*DATA/D*']); // any file name counts in crio.conf.d (MCO writes 50-pinned-images)
    await crio.reload();
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: false, [DB]: true },
      'later file replaces; keyword match, case-insensitive',
    );

    // a later file without the key keeps the list
    await writeFile(
      path.join(n.crioDropInDir, '30-other.conf'),
      '[crio.runtime]\nlog_level = "info"\n',
    );
    await crio.reload();
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: false, [DB]: true },
      'a file without pinned_images keeps the list',
    );

    // a TOML error anywhere aborts the reload: the old pins (and registries) stay
    await pins('25-pins.conf', [app.digestRef]);
    await writeFile(path.join(n.crioDropInDir, '40-broken.conf'), '[crio.image\npinned_images = [');
    const bad = await crio.reload();
    t.equal(bad.outcome, 'error');
    t.match(bad.error, /40-broken\.conf/);
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: false, [DB]: true },
      'failed reload: old pins kept',
    );
    await rm(path.join(n.crioDropInDir, '40-broken.conf'));
    await crio.reload();
    t.same(
      await pinnedMap(c),
      { [APP]: true, [TOOL]: false, [DB]: false },
      "fixed: 25-pins.conf replaces 20-pins's list, 30-other keeps it",
    );

    // the agent's pins drop-in (its own renderer), last in lexical order, replaces the rest
    await writePinsDropIn(n.crioDropInDir, 'zz-offline-bundle-pins.conf', [tool.tagRef]);
    await crio.reload();
    t.same(
      await pinnedMap(c),
      { [APP]: false, [TOOL]: true, [DB]: false },
      "the agent's drop-in works as CRI-O reads it",
    );
  },
);

t.test(
  'contract (CRI-O stand-in): --no-pin-support (CRI-O < 1.28) never reports pinned',
  async (t) => {
    const n = await node(t);
    await mirrorDropIn(n.registriesDropInDir, false);
    await writeFile(
      path.join(n.crioDropInDir, '10-pins.conf'),
      '[crio.image]\npinned_images = ["*"]\n',
    );
    const crio = await startCrioStandin(t, { ...n, dir: n.state, noPinSupport: true });
    const c = client(t, crio.socket);
    await c.pullImage(app.digestRef, { timeoutMs: PULL_TIMEOUT });
    await crio.reload();
    t.same(await pinnedMap(c), { [APP]: false }, 'pinned_images ignored');
    t.equal((await c.imageStatus(app.digestRef))?.pinned, false);
  },
);

t.test(
  'contract (CRI-O stand-in): a restart keeps the store and reads the config afresh; --pins-at-start-only (1.28.x)',
  async (t) => {
    const n = await node(t);
    await mirrorDropIn(n.registriesDropInDir, true);
    const first = await startCrioStandin(t, { ...n, dir: n.state, pinsAtStartOnly: true });
    const c1 = client(t, first.socket);
    const id = await c1.pullImage(app.digestRef, { timeoutMs: PULL_TIMEOUT });
    await writeFile(
      path.join(n.crioDropInDir, '10-pins.conf'),
      `[crio.image]\npinned_images = ["${app.digestRef}"]\n`,
    );
    t.equal((await first.reload()).outcome, 'ok');
    t.same(
      await pinnedMap(c1),
      { [APP]: false },
      '1.28.x: pins re-read on SIGHUP do not take effect',
    );
    const fs1 = await c1.imageFsInfo();
    t.equal(fs1.imageFilesystems[0]?.mountpoint, path.join(n.state, 'storage'));
    t.ok(
      (fs1.imageFilesystems[0]?.usedBytes ?? 0) > 0,
      "ImageFsInfo: used bytes of the store's filesystem",
    );
    c1.close();
    await first.stop();

    // The same state dir: the image is still there; no mirror is needed to see it.
    await rm(path.join(n.registriesDropInDir, '50-offline-bundle-mirror.conf'));
    const second = await startCrioStandin(t, { ...n, dir: n.state, pinsAtStartOnly: true });
    const c2 = client(t, second.socket);
    const list = await c2.listImages();
    t.same(
      list.map((i) => i.id),
      [id],
      'the image survived the restart',
    );
    t.same(await pinnedMap(c2), { [APP]: true }, 'a restart applies the pins');
    t.equal(
      (await c2.imageStatus(app.digestRef))?.pinned,
      false,
      '1.28.x: ImageStatus never reports pinned',
    );
    const start = (await second.events()).find((e) => e.event === 'start');
    t.same(start.registries, [], 'the restart read the config afresh (the mirror drop-in is gone)');
    t.ok(
      (await second.allEvents()).some((e) => e.event === 'stop' && e.pid === first.pid),
      'the first process logged its SIGTERM stop',
    );
  },
);
