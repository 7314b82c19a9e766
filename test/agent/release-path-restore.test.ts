// EUS to EUS from one stick (#43), images lost between the hops: a node (real containerd, the
// daemon) that loaded the path 4.15.40 → 4.16.2 while running 4.14.30 loses 4.15.40's own images
// while it runs 4.15.40 (a store pruned by hand, a GC). The stick plugged in again, or the layout
// kept on the node, brings them back, pinned; once the node runs 4.16.2 neither brings 4.15.40's
// back again (prune may take them), not even after a wipe of the whole store.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { copyFile, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CriImageClient } from '@offline-bundle/runtime';
import { readStatusFile } from '@offline-bundle/status';
import { until } from '../helpers/until.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, containerdNode, daemonChild, keygen, run } from './fixtures.js';
import { makePathBundle } from './path-bundle-setup.js';

const work = await tmpdir(t, 'ob-path-restore-');
const keys = await keygen(work);
const { file } = await makePathBundle(work, keys.key);

/** A containerd node running 4.14.30 that trusts the path bundle's key, with what the test asks of it. */
async function pathNode(
  t: { teardown(fn: () => unknown): void },
  prefix: string,
  settings: Record<string, unknown> = {},
) {
  const n = await containerdNode(t, prefix, '', {
    settings: { version: { current: '4.14.30' }, ...settings },
  });
  await writeFile(join(n.root, 'etc/bundle-agent/keys/factory.pub'), await readFile(keys.pub));
  const cri = new CriImageClient(n.ctd.socket);
  t.teardown(() => cri.close());
  const ctr = (...args: string[]) =>
    execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', ...args], {
      encoding: 'utf8',
    });
  const namesOf = (i: { repoTags: string[]; repoDigests: string[] }) => [
    ...i.repoTags,
    ...i.repoDigests,
  ];
  /** Which of `refs` the runtime holds. */
  const held = async (refs: string[]) => {
    const all = new Set((await cri.listImages()).flatMap(namesOf));
    return refs.filter((r) => all.has(r));
  };
  return {
    ...n,
    statusFile: join(n.root, 'var/lib/bundle-agent/status.json'),
    agent: (...args: string[]) => run(AGENT, [...args, '--config', n.config], process.env, 300_000),
    setCurrent: async (v: string) =>
      writeFile(
        n.config,
        (await readFile(n.config, 'utf8')).replace(/current: "[^"]*"/, `current: "${v}"`),
      ),
    /** Each release's image names, as the latest load's record keeps them. */
    refsOf: async () => {
      const dir = join(n.root, 'var/lib/bundle-agent/releases');
      const recs = await Promise.all(
        (await readdir(dir)).map(async (f) => JSON.parse(await readFile(join(dir, f), 'utf8'))),
      );
      // the latest load's record of each (an earlier bundle's may be there too)
      const of = (v: string) =>
        recs
          .filter((r) => r.version === v)
          .sort((a, b) => a.loadedAt.localeCompare(b.loadedAt))
          .at(-1).refs as string[];
      return { r15: of('4.15.40'), r16: of('4.16.2') };
    },
    held,
    recordsDir: join(n.root, 'var/lib/bundle-agent/releases'),
    /** The versions of the release records, as the agent reads them (one per bundle of a release). */
    recordVersions: async () => {
      const dir = join(n.root, 'var/lib/bundle-agent/releases');
      return Promise.all(
        (await readdir(dir)).map(
          async (f) => JSON.parse(await readFile(join(dir, f), 'utf8')).version as string,
        ),
      );
    },
    pinned: () =>
      ctr('ls')
        .split('\n')
        .filter((l) => l.includes('io.cri-containerd.pinned=pinned'))
        .map((l) => l.split(/\s+/)[0]),
    /** Removes every image named by one of `refs` (all its names and its ID), as a prune of the store by hand would. */
    remove: async (refs: string[]) => {
      const gone = (await cri.listImages()).filter((i) => namesOf(i).some((x) => refs.includes(x)));
      ctr('rm', ...gone.flatMap((i) => [...namesOf(i), i.id]));
      // the CRI plugin learns of the removals from containerd's events, a moment after `ctr rm` returns
      await until('containerd dropped them', async () => (await held(refs)).length === 0, {
        timeoutMs: 30_000,
        stepMs: 100,
      });
    },
  };
}

const LOADED_AGAIN = /update 4\.16\.2 is loaded on this node/;
const NOT_AGAIN =
  /path\.bundle was loaded before this start \(4\.16\.2\) and its images are in the runtime: not loading it again/;

t.test(
  'the stick plugged in again brings back the lost images of the release the node runs on the path, and none once it is past',
  async (t) => {
    const n = await pathNode(t, 'ob-path-stick-');
    const stick = join(n.root, 'var/lib/bundle-agent/drop/path.bundle');
    await copyFile(file, stick);
    const load = await n.agent('load', stick);
    t.equal(load.code, 0, load.stderr.slice(-800));
    t.same(
      await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []),
      [],
      'no copy kept on the node: only the stick can restore',
    );
    const status = await readStatusFile(n.statusFile);
    t.same(
      status?.history.map((e) => [e.version, e.state]),
      [
        ['4.14.30', 'running'],
        ['4.16.2', 'loaded'],
      ],
      'the status file with the path in bundle.path reads back whole: the next start knows 4.16.2 is loaded',
    );
    const { r15, r16 } = await n.refsOf();
    const only15 = r15.filter((r) => !r16.includes(r));
    t.equal(only15.length, 3, '4.15.40 has three images of its own (release image, cvo, mco)');

    // the cluster completed the first hop; 4.15.40's own images go
    await n.setCurrent('4.15.40');
    await n.remove(only15);
    const d = daemonChild(t, n.config, n.statusFile);
    await d.until(
      'the stick is decided',
      (_s, log) => LOADED_AGAIN.test(log) || NOT_AGAIN.test(log),
    );
    const log = await d.stop();
    t.match(
      log,
      LOADED_AGAIN,
      'the stick seen again is loaded again: an image of 4.15.40, which the node runs, was missing',
    );
    t.notMatch(log, NOT_AGAIN);
    t.same(await n.held(only15), only15, "4.15.40's images are back");
    const pins = n.pinned();
    t.same(
      only15.filter((r) => !pins.includes(r)),
      [],
      'and pinned',
    );
    t.same(
      r16.filter((r) => !pins.includes(r)),
      [],
      "4.16.2's too",
    );

    // the final release completed; 4.15.40's own images go again (a GC, a prune of the store)
    await n.setCurrent('4.16.2');
    await n.remove(only15);
    const d2 = daemonChild(t, n.config, n.statusFile);
    await d2.until('the stick is decided', (_s, l) => LOADED_AGAIN.test(l) || NOT_AGAIN.test(l));
    const log2 = await d2.stop();
    t.match(log2, NOT_AGAIN, 'running 4.16.2 with all of its images: the stick is not read again');
    t.notMatch(log2, /event=restore/, 'and no restore of 4.15.40 is tried or asked for');
    t.same(await n.held(only15), [], "4.15.40's images stay gone");
    const prune = await n.agent('releases', 'prune', '--json');
    t.same(
      JSON.parse(prune.stdout).forgotten.map((f: { version: string }) => f.version),
      ['4.15.40'],
      'prune takes 4.15.40',
    );

    // then the runtime loses its whole store (crio-wipe) and no layout is kept: the stick plugged in again
    // brings back what 4.16.2 needs, not the release the node went past, nor its record
    await n.remove([...r15, ...r16]);
    const d3 = daemonChild(t, n.config, n.statusFile);
    await d3.until('the stick is decided', (_s, l) => LOADED_AGAIN.test(l) || NOT_AGAIN.test(l));
    const log3 = await d3.stop();
    t.match(log3, LOADED_AGAIN, "the stick is loaded again: 4.16.2's images were gone");
    t.same(await n.held(r16), r16, "4.16.2's images are back");
    t.same(await n.held(only15), [], 'not those only 4.15.40 has, which the node went past');
    t.same(
      only15.filter((r) => n.pinned().includes(r)),
      [],
      'nor pinned',
    );
    t.notOk(
      (await n.recordVersions()).includes('4.15.40'),
      'and 4.15.40 gets no record again (prune took it)',
    );
  },
);

t.test(
  'the layout kept on the node brings back what the node still needs of the path, not a release it went past',
  async (t) => {
    const n = await pathNode(t, 'ob-path-kept-', { staging: { keep: true } });
    const load = await n.agent('load', file);
    t.equal(load.code, 0, load.stderr.slice(-800));
    t.same(
      await readdir(join(n.root, 'var/lib/upgrade')),
      ['4.16.2-amd64'],
      'one layout kept for the whole path',
    );
    const { r15, r16 } = await n.refsOf();
    const only15 = r15.filter((r) => !r16.includes(r));

    await n.setCurrent('4.15.40');
    await n.remove(only15);
    const d = daemonChild(t, n.config, n.statusFile);
    await d.until(
      'restored',
      (s) =>
        s?.phase === 'Ready' &&
        s.conditions?.some((c: { reason: string }) => c.reason === 'Restored'),
    );
    const log = await d.stop();
    const names = new Set([...r15, ...r16]).size;
    t.match(
      log,
      new RegExp(
        `images of (4\\.15\\.40 and 4\\.16\\.2|4\\.16\\.2 and 4\\.15\\.40) are gone from the runtime \\(${only15.length} of their ${names} names\\); loading them again from the kept layout`,
      ),
      'both releases of the path restored from the one layout, in one go',
    );
    t.same(await n.held(only15), only15, "4.15.40's images are back");
    t.same(
      only15.filter((r) => !n.pinned().includes(r)),
      [],
      'and pinned',
    );

    // the final release completed, then the runtime lost its whole store (crio-wipe, a disk replaced)
    await n.setCurrent('4.16.2');
    await n.remove([...r15, ...r16]);
    const d2 = daemonChild(t, n.config, n.statusFile);
    const ready = (x: any) => x?.conditions?.find((c: { type: string }) => c.type === 'Ready');
    const s = await d2.until(
      'restored',
      (x) =>
        x?.phase === 'Ready' &&
        ready(x)?.reason === 'Restored' &&
        /of 4\.16\.2 had vanished/.test(ready(x).message),
    );
    const log2 = await d2.stop();
    t.match(
      log2,
      new RegExp(
        `images of 4\\.16\\.2 are gone from the runtime \\(${r16.length} of their ${r16.length} names\\)`,
      ),
    );
    t.match(
      ready(s).message,
      /^4 of the 4 images of 4\.16\.2 had vanished from the runtime and were loaded again/,
      "the final release's four images, not the path's six",
    );
    t.same(await n.held(r16), r16, "4.16.2's images are back");
    t.same(
      r16.filter((r) => !n.pinned().includes(r)),
      [],
      'and pinned',
    );
    t.same(await n.held(only15), [], 'the release the node went past is not brought back');
  },
);

t.test(
  'a record of an earlier bundle of the path whose kept layout a later load overwrote loses it, and never blocks the restore from the bundle that is there',
  async (t) => {
    const n = await pathNode(t, 'ob-path-stale-', { staging: { keep: true } });
    const layout = join(n.root, 'var/lib/upgrade/4.16.2-amd64');
    // another build of the same path (its own bundle.json, so its own identity) was loaded first and kept in the same directory
    const staleRecord = (hex: string, refs: string[]) => ({
      version: '4.15.40',
      arch: 'amd64',
      digest: `sha256:${hex}`,
      refs,
      loadedAt: '2026-12-01T00:00:00.000Z',
      layout,
      source: 'bundle',
      identity: `sha256:${'e'.repeat(64)}`,
      path: ['4.15.40', '4.16.2'],
    });
    const STALE_HEX = '0'.repeat(64);
    const writeStale = (hex: string, refs: string[]) =>
      writeFile(
        join(n.recordsDir, `4.15.40-amd64@sha256-${hex}.json`),
        JSON.stringify(staleRecord(hex, refs)),
      );
    await mkdir(n.recordsDir, { recursive: true });
    await writeStale(STALE_HEX, []);
    const load = await n.agent('load', file);
    t.equal(load.code, 0, load.stderr.slice(-800));
    const first = JSON.parse(
      await readFile(join(n.recordsDir, `4.15.40-amd64@sha256-${STALE_HEX}.json`), 'utf8'),
    );
    t.equal(
      first.layout,
      undefined,
      "the load that overwrote the directory took its layout from the earlier bundle's record",
    );

    // the record as an agent before this fix left it, naming the directory still: read first (the agent reads
    // names in order, as Node's readdir gives them sorted; 0…0 comes before the path bundle's digest)
    const { r15, r16 } = await n.refsOf();
    const only15 = r15.filter((r) => !r16.includes(r));
    await writeStale(STALE_HEX, r15);
    t.equal(
      (await readdir(n.recordsDir)).find((f) => f.startsWith('4.15.40-')),
      `4.15.40-amd64@sha256-${STALE_HEX}.json`,
      'the stale record of 4.15.40 is read before the one of the bundle kept',
    );

    await n.setCurrent('4.15.40');
    await n.remove(only15);
    const d = daemonChild(t, n.config, n.statusFile);
    await d.until(
      'restored',
      (s) =>
        s?.phase === 'Ready' &&
        s.conditions?.some((c: { reason: string }) => c.reason === 'Restored'),
    );
    const log = await d.stop();
    t.notMatch(
      log,
      /holds another bundle\.json/,
      'no attempt with a record whose bundle is not in the directory',
    );
    t.same(
      await n.held(only15),
      only15,
      "4.15.40's images are back from the bundle the directory holds",
    );
    t.same(
      only15.filter((r) => !n.pinned().includes(r)),
      [],
      'and pinned',
    );
  },
);
