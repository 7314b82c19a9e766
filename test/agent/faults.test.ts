// Faults as tests (issue 7): bundle-agent in CRI-O mode against the CRI-O contract stand-in
// (test/helpers/crio-standin.mjs, a CRI ImageService that reads registries.conf.d only at
// start and on SIGHUP; CRI-O itself cannot run here). Each fault is injected into a real
// `bundle-agent load` (or `run`) child process at a phase read from its status.json, and
// each case ends Ready after recovery with nothing left behind: no *.partial (a staging cut
// short keeps its verified pieces for the same bundle's next load, which resumes), no staged
// layout (staging.keep is false), no offline-bundle-mirror.conf drop-in, phase Ready.
//
// Synchronisation is by polling (status.json, the stand-in's event log, process state);
// a process is frozen with SIGSTOP the moment the phase shows, so the fault lands inside
// that phase however loaded the machine is.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { rm, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import {
  MIRROR_DROP_IN,
  STAGED,
  MANIFEST,
  REFS,
  node,
  agent,
  startLoad,
  load,
  waitStatus,
  phase,
  frozenMidRead,
  cond,
  gone,
  pullsDone,
  expectReady,
  expectFailed,
  type Agent,
} from './faults-setup.js';
import { until } from '../helpers/until.js';

t.test('1. SIGKILL during staging: a new load, and the daemon at start, recover', async (t) => {
  const n = await node(t, {
    extra: 'media:\n  roots: [/media]\n  watchDirs: [/stick]\n  pollSeconds: 1\n',
  });
  // the daemon's watched "stick" is <root>/stick: the same copy the loads read
  const file = n.file;

  /** Kills a load in Staging; whether its partial staging names the bundle yet (then the next load resumes it). */
  const killInStaging = async (named = false): Promise<boolean> => {
    let a: Agent;
    if (named) {
      // once the partial staging names its bundle (bundle.json verified), while the rest is still read
      a = startLoad(n);
      const marker = join(n.upgradeDir, `${STAGED}.partial`, 'resume.json');
      await until(
        'the partial staging to name its bundle',
        async () =>
          stat(marker).then(
            () => true,
            () => false,
          ),
        { timeoutMs: 120_000, stepMs: 2 },
      );
      a.child.kill('SIGSTOP');
    } else {
      a = await frozenMidRead(t, n);
    }
    a.child.kill('SIGKILL');
    const r = await a.exit;
    t.equal(r.signal, 'SIGKILL', 'the agent was killed in Staging');
    const left = await n.leftovers();
    t.same(left.partial, [`${STAGED}.partial`], 'it left its partial staging behind');
    return stat(join(n.upgradeDir, `${STAGED}.partial`, 'resume.json')).then(
      () => true,
      () => false,
    );
  };
  // killed before bundle.json was verified, the pieces name no bundle: dropped, not resumed
  const recovered = (marked: boolean) =>
    marked
      ? /resuming: .* already staged \(\d+ of \d+ files, each hashed again while the rest is read\)/
      : /removed unfinished staging that names no bundle: 1\.1\.0-amd64\.partial/;

  let marked = await killInStaging(true);
  t.ok(marked, 'killed after its bundle.json was verified');
  const again = await load(n, file);
  t.match(
    again.stderr,
    recovered(marked),
    marked
      ? 'the new load resumed the staging'
      : 'the new load dropped the unnamed partial staging',
  );
  await expectReady(t, n, again, 'a new load of the same file');

  marked = await killInStaging();
  const d = agent(n, ['run']);
  t.teardown(() => {
    d.child.kill('SIGKILL');
  });
  // its own journal line, not status.json: the killed load may not have overwritten the last Ready there
  // the journal line comes as the status changes; the file is written just after it
  await until(
    'the daemon to load the stick to Ready or Failed',
    async () =>
      (/event=(ready|failed)/.test(d.stderr()) &&
        ['Ready', 'Failed'].includes((await n.status())?.phase ?? '')) ||
      d.child.exitCode !== null,
    { timeoutMs: 120_000 },
  );
  const s = (await n.status())!;
  t.equal(s.bundle?.file, file, "the status is about the stick's bundle");
  d.child.kill('SIGTERM');
  const r = await d.exit;
  t.equal(
    s.phase,
    'Ready',
    `the daemon loaded it: Ready (${s.phase} ${JSON.stringify(cond(s, 'Failed'))} ${d.stderr().slice(-600)})`,
  );
  t.equal(r.code, 0, 'the daemon stops cleanly on SIGTERM');
  t.match(
    r.stderr,
    recovered(marked),
    marked
      ? 'the daemon resumed the staging the killed load left'
      : 'the start-up cleanup removed the unnamed partial staging',
  );
  t.same(await n.leftovers(), { partial: [], staged: [], dropIns: [] }, 'nothing left');
});

t.test(
  '2. SIGKILL during pre-load (runtime frozen): the next load removes the drop-in, resumes from the layout put back as a marked partial, then Ready',
  async (t) => {
    const n = await node(t);
    const a = startLoad(n);
    await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
    process.kill(n.crio.pid, 'SIGSTOP');
    try {
      t.ok((await pullsDone(n)) < REFS, 'a pull is still in flight when the runtime freezes');
      a.child.kill('SIGKILL');
      t.equal((await a.exit).signal, 'SIGKILL');
    } finally {
      process.kill(n.crio.pid, 'SIGCONT');
    }
    t.same(
      await n.leftovers(),
      { partial: [], staged: [STAGED], dropIns: [MIRROR_DROP_IN] },
      'the killed load left the mirror drop-in and the staged layout',
    );
    const r = await load(n);
    await expectReady(t, n, r, 'the next load');
    t.match(
      r.stderr,
      /kept the layout .*1\.1\.0-amd64 that no load finished as .*\.partial/,
      'the unrecorded layout went back to a marked partial staging, not removed',
    );
    t.match(r.stderr, /resuming: .* already staged/, 'and the next load resumed from it');
  },
);

/** The stand-in's own children (its skopeo pulls): a runtime killed outright takes its pulls with it. */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

t.test(
  '3. the runtime killed during pre-load and restarted: the pulls retry, the same load ends Ready',
  async (t) => {
    // preload.retries and the backoff as shipped (3 retries, 1 s doubling, with jitter)
    const n = await node(t, { retries: 'default' });
    const a = startLoad(n);
    await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
    const old = n.crio.pid;
    const pulls = childrenOf(old);
    process.kill(old, 'SIGKILL');
    for (const c of pulls)
      try {
        process.kill(c, 'SIGKILL');
      } catch {
        /* done already */
      }
    const killedAt = Date.now();
    await until('the killed stand-in to be gone', async () => gone(old), { timeoutMs: 30_000 });
    t.ok((await pullsDone(n)) < REFS, 'pulls were still in flight when the runtime died');
    await n.restartCrio();
    const downMs = Date.now() - killedAt;
    t.comment(`the runtime was down for ${downMs} ms`);
    const r = await a.exit;
    await expectReady(t, n, r, 'the same load');
    const ev = await n.crio.events();
    t.ok(
      ev.some((e: any) => e.event === 'pull' && e.outcome === 'ok' && e.mirror),
      'the restarted runtime pulled through the mirror (it read the drop-in at start)',
    );
  },
);

t.test(
  '4. the upgrade filesystem fills up mid-copy: Failed, nothing left; with the space back, Ready',
  async (t) => {
    // room for the layout (the space check passes), not for the layout and a filler
    const n = await node(t, { upgradeFs: Math.ceil((MANIFEST.totals.layoutBytes * 1.25) / 1024) });
    const filler = join(n.upgradeDir, 'filler');
    const a = await frozenMidRead(t, n);
    try {
      t.same(
        (await n.leftovers()).partial,
        [`${STAGED}.partial`],
        'staging has begun (the space check passed)',
      );
      const fs = await statfs(n.upgradeDir);
      const free = fs.bavail * fs.bsize;
      execFileSync('fallocate', ['-l', String(free), filler]);
      const after = await statfs(n.upgradeDir);
      t.equal(after.bavail, 0, 'the filler took every free block');
    } finally {
      a.child.kill('SIGCONT');
    }
    const s = await expectFailed(t, n, await a.exit, 'InsufficientSpace', 'the load', ['filler']);
    t.match(
      cond(s, 'Failed')?.message,
      /ENOSPC.*free space on the filesystem of .*var\/lib\/upgrade/,
      'the message names the cause and where to free space',
    );
    await rm(filler);
    await expectReady(t, n, await load(n), 'the next load, with the space back');
  },
);

// The media-mode node: too little room to stage the layout (a 64 KiB upgradeDir), room enough for the images.
