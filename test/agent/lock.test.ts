// The load lock must be exclusive under contention: between processes (the daemon and
// `bundle-agent load`), between calls of one process, and while a dead holder's file is
// being cleared. The body of each hold creates a marker exclusively, so any overlap shows.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { tmpdir } from '../helpers/tmp.mjs';
import { processIdentity } from '@offline-bundle/status';

const LOCK_JS = pathToFileURL(
  new URL('../../agent/dist/state/lock.js', import.meta.url).pathname,
).href;
const { withLoadLock } = (await import(LOCK_JS)) as {
  withLoadLock: <T>(dir: string, fn: () => Promise<T>) => Promise<T>;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Tally {
  acquired: number;
  busy: number;
  overlaps: number;
  errors: string[];
}

/** Tries to take the lock once; the hold checks nobody else is inside. */
async function attempt(stateDir: string, tally: Tally, holdMs = 2): Promise<boolean> {
  try {
    await withLoadLock(stateDir, async () => {
      const inside = join(stateDir, 'inside');
      try {
        await writeFile(inside, String(process.pid), { flag: 'wx' });
      } catch {
        tally.overlaps++;
        return;
      }
      await sleep(Math.random() * holdMs);
      await rm(inside);
    });
    tally.acquired++;
    return true;
  } catch (err) {
    if ((err as { reason?: string }).reason === 'Busy') tally.busy++;
    else tally.errors.push(String((err as Error).message));
    return false;
  }
}

const CHILD = `
const { withLoadLock } = await import(process.argv[2]);
const { writeFile, rm } = await import('node:fs/promises');
const { join } = await import('node:path');
const [base, trials, start] = [process.argv[3], Number(process.argv[4]), Number(process.argv[5])];
const tally = { acquired: 0, busy: 0, overlaps: 0, errors: [] };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
await sleep(start - Date.now()); // all children start together, whatever their start-up took
for (let i = 0; i < trials; i++) {
  const dir = join(base, 'trial-' + i);
  // every child takes each trial's lock once, retrying while it is busy
  for (let tries = 0; tries < 2000; tries++) {
    let ok = false;
    try {
      await withLoadLock(dir, async () => {
        try { await writeFile(join(dir, 'inside'), String(process.pid), { flag: 'wx' }); } catch { tally.overlaps++; return; }
        await sleep(Math.random() * 2);
        await rm(join(dir, 'inside'));
      });
      tally.acquired++;
      ok = true;
    } catch (err) {
      if (err.reason === 'Busy') tally.busy++; else tally.errors.push(String(err.message));
    }
    if (ok) break;
    await sleep(Math.random() * 2);
  }
}
process.stdout.write(JSON.stringify(tally));
`;

function child(script: string, base: string, trials: number, start: number): Promise<Tally> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script, LOCK_JS, base, String(trials), String(start)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    p.on('error', reject);
    p.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(out) as Tally) : reject(new Error(`child exited ${code}`)),
    );
  });
}

t.test('processes: 40 trials x 6 processes, one holder at a time', async (t) => {
  const dir = await tmpdir(t, 'ob-lock-');
  const script = join(dir, 'child.mjs');
  await writeFile(script, CHILD);
  const [procs, trials] = [6, 40];
  const start = Date.now() + 2000;
  const tallies = await Promise.all(
    Array.from({ length: procs }, () => child(script, join(dir, 'state'), trials, start)),
  );
  const sum = (k: 'acquired' | 'busy' | 'overlaps') => tallies.reduce((n, x) => n + x[k], 0);
  t.equal(sum('overlaps'), 0, 'never two holders at once');
  t.same(
    tallies.flatMap((x) => x.errors),
    [],
    'every refusal is Busy',
  );
  t.equal(sum('acquired'), procs * trials, "each process took each trial's lock once");
  t.comment(`${sum('busy')} Busy refusals on the way`);
});

t.test('one process: 40 trials x 8 concurrent calls, one holder at a time', async (t) => {
  const dir = await tmpdir(t, 'ob-lock-');
  const tally: Tally = { acquired: 0, busy: 0, overlaps: 0, errors: [] };
  for (let i = 0; i < 40; i++) {
    const state = join(dir, `t${i}`);
    const before = tally.acquired;
    await Promise.all(Array.from({ length: 8 }, () => attempt(state, tally, 5)));
    t.ok(tally.acquired - before >= 1, `trial ${i}: someone held it`);
  }
  t.equal(tally.overlaps, 0, 'never two holders at once');
  t.same(tally.errors, [], 'every refusal is Busy');
});

async function deadPid(): Promise<number> {
  const p = spawn(process.execPath, ['-e', '0']);
  await new Promise((r) => p.on('exit', r));
  return p.pid!;
}

t.test("a dead holder's lock is taken over once, however many contend for it", async (t) => {
  const dir = await tmpdir(t, 'ob-lock-');
  const dead = await deadPid();
  const tally: Tally = { acquired: 0, busy: 0, overlaps: 0, errors: [] };
  for (let i = 0; i < 40; i++) {
    const state = join(dir, `t${i}`);
    await mkdir(state, { recursive: true });
    await writeFile(join(state, 'load.lock'), `${dead}\n`);
    await Promise.all(Array.from({ length: 8 }, () => attempt(state, tally, 5)));
  }
  t.equal(tally.overlaps, 0, 'never two holders at once');
  t.same(tally.errors, [], 'every refusal is Busy');
  t.ok(tally.acquired >= 40, 'every trial was taken over');

  const own = join(dir, 'own');
  await mkdir(own);
  await writeFile(join(own, 'load.lock'), `${process.pid}\n`);
  t.equal(
    await withLoadLock(own, async () => 'ran'),
    'ran',
    'our own pid left by a former process (a restarted container) is stale too',
  );
});

t.test('a lock file without a complete pid is never taken for stale', async (t) => {
  const dir = await tmpdir(t, 'ob-lock-');
  for (const content of ['', '12', 'garbage\n']) {
    await writeFile(join(dir, 'load.lock'), content);
    await t.rejects(
      withLoadLock(dir, async () => 'ran'),
      { reason: 'Busy' },
      `content ${JSON.stringify(content)}: Busy`,
    );
    t.equal(await readFile(join(dir, 'load.lock'), 'utf8'), content, 'and left alone');
  }
  await rm(join(dir, 'load.lock'));
  await withLoadLock(dir, async () => undefined);
  await t.rejects(readFile(join(dir, 'load.lock')), 'released after the hold');
});

t.test(
  'a lock left before a power cut is stale even when its pid now belongs to another live process',
  async (t) => {
    const dir = await tmpdir(t, 'ob-lock-');
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)']);
    t.teardown(() => other.kill());
    await new Promise((r) => other.once('spawn', r));
    const real = await processIdentity(other.pid!);
    t.ok(real.startTicks && real.bootId, 'this machine tells start times and boots apart');
    const cases: [string, string, boolean][] = [
      ['its own start time and boot', `${other.pid} ${real.startTicks} ${real.bootId}\n`, true],
      [
        'another start time (pid reused in this boot)',
        `${other.pid} ${Number(real.startTicks) + 1} ${real.bootId}\n`,
        false,
      ],
      [
        'another boot',
        `${other.pid} ${real.startTicks} 00000000-0000-0000-0000-000000000000\n`,
        false,
      ],
      ["a bare pid (an older agent's lock): cannot tell, so Busy", `${other.pid}\n`, true],
    ];
    for (const [what, content, busy] of cases) {
      await writeFile(join(dir, 'load.lock'), content);
      if (busy)
        await t.rejects(
          withLoadLock(dir, async () => 'ran'),
          { reason: 'Busy' },
          `${what}: Busy`,
        );
      else t.equal(await withLoadLock(dir, async () => 'ran'), 'ran', `${what}: taken over`);
      await rm(join(dir, 'load.lock'), { force: true });
    }
    await withLoadLock(dir, async () => {
      const [pid, ticks, boot] = (await readFile(join(dir, 'load.lock'), 'utf8')).trim().split(' ');
      const own = await processIdentity(process.pid);
      t.same(
        [Number(pid), ticks, boot],
        [process.pid, own.startTicks, own.bootId],
        'a holder records its pid, start time and boot',
      );
    });
  },
);
