// The status file names its writer (pid, boot, start time) and carries a heartbeat, so a
// reader can tell a live agent from a dead one whose pid another process may now hold.
import t from 'tap';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  emptyStatus,
  processIdentity,
  StatusFileWriter,
  writerLiveness,
  type StatusFile,
} from '@offline-bundle/status';
import { tmpdir } from './lib.js';
import { until } from '../helpers/until.js';

const read = async (file: string) => JSON.parse(await readFile(file, 'utf8')) as StatusFile;

t.test(
  'every write names this process and its heartbeat; the reader finds it running',
  async (t) => {
    const dir = await tmpdir(t, 'ob-live-');
    const file = path.join(dir, 'status.json');
    const w = new StatusFileWriter(file, { command: 'run', heartbeatSeconds: 30 });
    w.sink(emptyStatus('worker-1'));
    await w.stop();
    const s = await read(file);
    t.equal(s.writer?.pid, process.pid);
    t.equal(s.writer?.command, 'run');
    t.equal(s.writer?.heartbeatSeconds, 30);
    t.same(
      { bootId: s.writer?.bootId, startTicks: s.writer?.startTicks },
      await processIdentity(process.pid),
      'boot and start time recorded',
    );
    t.ok(s.writer?.startTicks && /^\d+$/.test(s.writer.startTicks), 'start time read from /proc');
    t.equal(s.phase, 'Idle', 'the status itself is unchanged');
    t.equal(await writerLiveness(s.writer), 'running');
  },
);

t.test('the heartbeat rewrites the file while nothing changes', async (t) => {
  const dir = await tmpdir(t, 'ob-live-');
  const file = path.join(dir, 'status.json');
  const w = new StatusFileWriter(file, { command: 'run', heartbeatSeconds: 1 });
  t.teardown(() => w.stop());
  w.sink(emptyStatus('worker-1'));
  await w.stop(); // the first write is done
  w.start();
  const first = (await read(file)).writer!.heartbeatAt;
  const later = await until(
    'a heartbeat after the first',
    async () => {
      const at = (await read(file).catch(() => undefined))?.writer?.heartbeatAt;
      return at !== undefined && at !== first ? at : undefined;
    },
    { timeoutMs: 30_000, stepMs: 50 },
  );
  t.ok(Date.parse(later) > Date.parse(first), `heartbeat moved on (${first} → ${later})`);
});

t.test(
  'a writer that exited is stopped, and so is another process under its pid or another boot',
  async (t) => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], {
      stdio: 'ignore',
    });
    await new Promise((r) => child.once('spawn', r));
    const id = await processIdentity(child.pid!);
    const record = {
      pid: child.pid!,
      ...id,
      heartbeatAt: new Date().toISOString(),
      heartbeatSeconds: 30,
    };
    t.equal(await writerLiveness(record), 'running', 'alive: running');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    t.equal(await writerLiveness(record), 'stopped', 'killed: stopped');

    const me = await processIdentity(process.pid);
    const fresh = new Date().toISOString();
    t.equal(
      await writerLiveness({
        pid: process.pid,
        ...me,
        startTicks: String(Number(me.startTicks) + 1),
        heartbeatAt: fresh,
        heartbeatSeconds: 30,
      }),
      'stopped',
      'a live pid that started at another time is another process: the writer is gone',
    );
    t.equal(
      await writerLiveness({
        pid: process.pid,
        ...me,
        bootId: 'another-boot',
        heartbeatAt: fresh,
        heartbeatSeconds: 30,
      }),
      'stopped',
      'written before a reboot: gone',
    );
    const old = new Date(Date.now() - 3600_000).toISOString();
    t.equal(
      await writerLiveness({ pid: process.pid, ...me, heartbeatAt: old, heartbeatSeconds: 30 }),
      'unresponsive',
      'the same process, but silent for an hour: not responding',
    );
    t.equal(
      await writerLiveness({
        pid: process.pid,
        startTicks: me.startTicks!,
        heartbeatAt: fresh,
        heartbeatSeconds: 30,
      }),
      'running',
      'no boot id (the unit hides /proc/sys): the start time decides',
    );
    t.equal(
      await writerLiveness({
        pid: process.pid,
        startTicks: String(Number(me.startTicks) + 1),
        heartbeatAt: fresh,
        heartbeatSeconds: 30,
      }),
      'stopped',
      'no boot id, another start time: gone',
    );
    t.equal(
      await writerLiveness({ pid: process.pid, heartbeatAt: old, heartbeatSeconds: 30 }),
      'stopped',
      'no identity to compare: an old heartbeat means gone',
    );
    t.equal(
      await writerLiveness({ pid: process.pid, heartbeatAt: fresh, heartbeatSeconds: 30 }),
      'running',
      'no identity to compare, fresh heartbeat: running',
    );
    t.equal(
      await writerLiveness(undefined),
      'unknown',
      'a file from an agent that did not record its writer',
    );
  },
);

// A daemon adopts what a by-hand load wrote (StatusFileWriter's `adopt`). A load that writes
// Ready and exits while the daemon is looking must not be taken for a load killed in its last
// in-flight phase (a CI run showed "stopped before it finished" for a load that had ended
// Ready): between the daemon's read and its pid check ('found newer', 'adopted alive earlier':
// the injected liveness check does what the load did in that window, writes its last status
// and is gone), or between the daemon's adoption and its write-back ('before the write-back').
t.test(
  'a load that writes its last status and exits while the daemon looks is adopted at its last status',
  async (t) => {
    for (const when of ['found newer', 'adopted alive earlier', 'before the write-back'] as const) {
      const dir = await tmpdir(t, 'ob-live-');
      const file = path.join(dir, 'status.json');
      const load = {
        pid: 2 ** 22 + 7,
        bootId: 'b',
        startTicks: '1',
        command: 'load' as const,
        heartbeatAt: new Date().toISOString(),
        heartbeatSeconds: 30,
      };
      const statusOfLoad = (phase: 'Pinning' | 'Ready') =>
        JSON.stringify({
          ...emptyStatus('worker-1'),
          phase,
          updatedAt: new Date().toISOString(),
          writer: { ...load, heartbeatAt: new Date().toISOString() },
        });
      const loadWrites = async (phase: 'Pinning' | 'Ready') => {
        await sleep(5); // a later millisecond than the daemon's last write
        await writeFile(file, statusOfLoad(phase));
      };
      let dies = when === 'found newer';
      let gone = false;
      const adopted: { phase: string; gone: boolean }[] = [];
      const w = new StatusFileWriter(file, {
        command: 'run',
        heartbeatSeconds: 1,
        liveness: async () => {
          if (gone) return 'stopped';
          if (!dies) return 'running';
          await loadWrites('Ready');
          gone = true;
          return 'stopped';
        },
        // as the daemon's tracker does: the adopted status comes back through sink, stamped now
        adopt: (s, writerGone) => {
          adopted.push({ phase: s.phase, gone: writerGone });
          if (when === 'before the write-back' && adopted.length === 1) {
            writeFileSync(file, statusOfLoad('Ready'));
            gone = true;
          }
          w.sink({ ...s, updatedAt: new Date().toISOString() });
        },
      });
      t.teardown(() => w.stop());
      w.sink(emptyStatus('worker-1'));
      await w.stop();
      await loadWrites('Pinning');
      w.start();
      if (when !== 'found newer') {
        await until('the phase of the load adopted', async () => adopted.length > 0, {
          timeoutMs: 30_000,
          stepMs: 50,
        });
        t.same(
          adopted[0],
          { phase: 'Pinning', gone: false },
          `${when}: the load's phase adopted while it runs`,
        );
        dies = true;
      }
      await until('the load gone', async () => gone, { timeoutMs: 30_000, stepMs: 50 });
      await until('its going adopted', async () => adopted.at(-1)?.gone === true, {
        timeoutMs: 30_000,
        stepMs: 50,
      });
      await w.stop();
      t.same(
        adopted.at(-1),
        { phase: 'Ready', gone: true },
        `${when}: its last word is adopted (Ready), not the Pinning it wrote before`,
      );
      t.equal(
        (await read(file)).phase,
        'Ready',
        `${when}: the file says Ready, written by the daemon`,
      );
      t.equal((await read(file)).writer?.pid, process.pid, `${when}: and stamped by it`);
    }
  },
);

// The daemon adopts a file written after its last status; one whose time is ahead of its clock
// (a clock stepped back, an offline node's RTC reset) must be adopted once and then written
// over, not adopted again at every write-back (which never wrote, and kept the daemon busy).
t.test(
  "a status file dated ahead of the daemon's clock is adopted once, then the daemon writes again",
  async (t) => {
    const dir = await tmpdir(t, 'ob-live-');
    const file = path.join(dir, 'status.json');
    const ahead = new Date(Date.now() + 3600_000).toISOString();
    await writeFile(
      file,
      JSON.stringify({
        ...emptyStatus('worker-1'),
        phase: 'Ready',
        updatedAt: ahead,
        writer: {
          pid: 2 ** 22 + 9,
          bootId: 'b',
          startTicks: '1',
          command: 'run',
          heartbeatAt: ahead,
          heartbeatSeconds: 30,
        },
      }),
    );
    const adopted: string[] = [];
    const w = new StatusFileWriter(file, {
      command: 'run',
      heartbeatSeconds: 1,
      liveness: async () => 'stopped',
      adopt: (s) => {
        adopted.push(s.phase);
        if (adopted.length < 1000) w.sink({ ...s, updatedAt: new Date().toISOString() });
      },
    });
    t.teardown(() => w.stop());
    w.sink(emptyStatus('worker-1'));
    await until(
      'this process writes the status',
      async () => (await read(file)).writer?.pid === process.pid,
      { timeoutMs: 30_000, stepMs: 50 },
    );
    await sleep(1500); // a heartbeat after it
    await w.stop();
    t.same(adopted, ['Ready'], "adopted once (the previous writer's Ready)");
    const s = await read(file);
    t.equal(s.writer?.pid, process.pid, 'then written by the daemon');
    t.equal(s.phase, 'Ready', 'with what it adopted');
  },
);
