// Copies in progress, renames and junk while the real daemon watches, with a real containerd: a
// file is loaded once it stopped changing and reads as a bundle, once per change, never a
// renamed or symlinked copy again; thousands of junk files cost no reads per poll; a forgotten
// release stays forgotten over a restart with its stick still in.
import t from 'tap';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdir, open, readFile, rename, symlink, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT, containerdNode, makeBundle, run, stick } from './fixtures.js';
import { until } from '../helpers/until.js';

const images = [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } }];
const images2 = [{ name: 'quay.io/acme/app:v2', files: { 'app.txt': 'app v2' } }];
const images3 = [{ name: 'quay.io/acme/app:v3', files: { 'app.txt': 'app v3' } }];

const count = (log: string, re: RegExp) => (log.match(re) ?? []).length;

/** The daemon as a child process: its log, every phase its status went through, and waits on both. */
function startDaemon(config: string, statusFile: string) {
  const child: ChildProcess = spawn(process.execPath, [AGENT, 'run', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const d = { child, log: '', phases: [] as string[], last: undefined as any };
  child.stdout!.on('data', (b: Buffer) => {
    d.log += b;
  });
  child.stderr!.on('data', (b: Buffer) => {
    d.log += b;
  });
  const exited = new Promise((r) => child.once('exit', r));
  let stopped = false;
  const sample = async () => {
    while (!stopped) {
      const s = await readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
      if (s && d.phases.at(-1) !== `${s.phase} ${s.bundle?.file ?? ''}`)
        d.phases.push(`${s.phase} ${s.bundle?.file ?? ''}`);
      d.last = s;
      await sleep(100);
    }
  };
  void sample();
  return {
    d,
    /** Waits until `ok` holds of the log and the status (a deadline only against a hang). */
    async until(what: string, ok: (log: string, s: any) => boolean) {
      await until(
        what,
        () => {
          if (ok(d.log, d.last)) return true;
          if (child.exitCode !== null || child.signalCode !== null)
            throw new Error(
              `the daemon exited (${child.exitCode ?? child.signalCode}) before: ${what}; log: ${d.log.slice(-2000)}`,
            );
          return false;
        },
        { timeoutMs: 120_000, stepMs: 100, detail: () => `log: ${d.log.slice(-2000)}` },
      );
    },
    async stop() {
      child.kill('SIGTERM');
      await exited;
      stopped = true;
    },
  };
}

t.test('the daemon with copies in progress, renames, junk and a forgotten release', async (t) => {
  const { dir, keys, root, config } = await containerdNode(t, 'ob-agent-media-');
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const drop = join(root, 'var/lib/bundle-agent/drop');
  await mkdir(drop, { recursive: true });
  const usb = join(root, 'media/usb');
  const kind = await stick(dir, usb, 64, t);
  t.comment(
    kind === 'loop'
      ? 'the stick is a loop-mounted ext4 filesystem'
      : 'mount not permitted: the stick is a plain directory (under the media root, so not a mount)',
  );
  if (kind !== 'loop') {
    await writeFile(
      config,
      (await readFile(config, 'utf8')).replace(
        'watchDirs: [/var/lib/bundle-agent/drop]',
        'watchDirs: [/var/lib/bundle-agent/drop, /media/usb]',
      ),
    );
  }
  const v110 = await readFile(
    await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'v110.bundle'),
    }),
  );
  const v120 = await readFile(
    await makeBundle(dir, {
      key: keys.key,
      version: '1.2.0',
      images: images2,
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'v120.bundle'),
    }),
  );
  const v130 = await readFile(
    await makeBundle(dir, {
      key: keys.key,
      version: '1.3.0',
      images: images3,
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'v130.bundle'),
    }),
  );
  let daemon = startDaemon(config, statusFile);
  t.teardown(() => daemon.stop());
  await daemon.until(
    'the daemon watches',
    (_l, s) => s?.phase === 'Idle' && /watching/.test(daemon.d.log),
  );

  await t.test(
    'copies that grow slowly, onto a mounted stick and into the drop directory, are each loaded once, when complete',
    async (t) => {
      /** Writes `bytes` a twelfth at a time, each piece after the daemon's next poll or so: the file grows across many looks. */
      const slowCopy = async (file: string, bytes: Buffer) => {
        const fh = await open(file, 'w');
        const step = Math.ceil(bytes.length / 12);
        for (let off = 0; off < bytes.length; off += step) {
          await fh.write(bytes.subarray(off, off + step), 0, undefined, off);
          await fh.sync();
          await sleep(400);
        }
        await fh.close();
      };
      await Promise.all([
        slowCopy(join(usb, 'update.bundle'), v110),
        slowCopy(join(drop, 'slow.bundle'), v130),
      ]);
      await daemon.until(
        'both loaded',
        (l) => count(l, /event=ready/g) >= 2 && daemon.d.last?.phase === 'Ready',
      );
      t.equal(
        count(daemon.d.log, /bundle found: \S*usb\/update\.bundle/g),
        1,
        "the stick's: one load began",
      );
      t.equal(
        count(daemon.d.log, /bundle found: \S*drop\/slow\.bundle/g),
        1,
        "the drop directory's: one load began",
      );
      t.equal(count(daemon.d.log, /event=ready/g), 2, 'two Ready, one each');
      t.notOk(
        daemon.d.phases.some((p) => p.startsWith('Failed')),
        `never Failed on the way (${daemon.d.phases.join(', ')})`,
      );
    },
  );

  await t.test(
    'a copier that writes the end first and pauses is not taken until the whole file is there',
    async (t) => {
      const file = join(drop, 'endfirst.bundle');
      const fh = await open(file, 'w');
      const cut = Math.floor(v120.length / 2);
      await fh.write(v120.subarray(cut), 0, undefined, cut);
      await fh.sync();
      // paused until the daemon has looked at it and said what it is (or, before the fix, loaded it)
      await daemon.until(
        'the daemon judged the paused copy',
        (l) => /endfirst\.bundle is ignored/.test(l) || /bundle found: \S*endfirst/.test(l),
      );
      t.equal(
        count(daemon.d.log, /bundle found: \S*endfirst/g),
        0,
        'the paused copy was not loaded',
      );
      await fh.write(v120.subarray(0, cut), 0, undefined, 0);
      await fh.close();
      await daemon.until(
        "Ready on the drop directory's bundle",
        (_l, s) => s?.phase === 'Ready' && /endfirst\.bundle$/.test(s.bundle?.file ?? ''),
      );
      t.equal(count(daemon.d.log, /bundle found: \S*endfirst/g), 1, 'loaded once, complete');
      t.notOk(
        daemon.d.phases.some((p) => p.startsWith('Failed')),
        'never reported Corrupt or Truncated',
      );
    },
  );

  await t.test('a loaded bundle renamed, and symlinked, is not loaded again', async (t) => {
    await rename(join(drop, 'endfirst.bundle'), join(drop, 'moved.bundle'));
    await symlink(join(drop, 'moved.bundle'), join(drop, 'link.bundle'));
    // a junk file put there afterwards: once the daemon has judged it, it has looked at the others for as long
    await writeFile(join(drop, 'marker.bundle'), 'not a bundle');
    await daemon.until('the daemon judged the marker', (l) => /marker\.bundle is ignored/.test(l));
    t.equal(
      count(daemon.d.log, /bundle found: \S*(moved|link)\.bundle/g),
      0,
      'no load of the renamed file or the symlink',
    );
  });

  await t.test(
    'a copy cut short and left there: not loaded, the status line says so while it is there, the Ready state kept',
    async (t) => {
      const file = join(drop, 'cut.bundle');
      await writeFile(file, v120.subarray(0, Math.floor(v120.length * 0.7)));
      const noted = (s: any) =>
        s?.conditions?.some(
          (c: any) =>
            c.type === 'MediaIncomplete' &&
            c.reason === 'IncompleteFile' &&
            c.message.includes(file),
        );
      await daemon.until('the cut copy is noted in the status', (_l, s) => noted(s));
      t.equal(daemon.d.last.phase, 'Ready', 'the node stays Ready for what it loaded');
      t.match(
        daemon.d.last.message,
        /An update file found is incomplete and was not loaded: copy it again/,
        "the technician's line says it",
      );
      t.equal(count(daemon.d.log, /bundle found: \S*cut\.bundle/g), 0, 'not loaded');
      await unlink(file);
      await daemon.until(
        'the note goes with the file',
        (_l, s) => s && !noted(s) && !/incomplete/.test(s.message),
      );
      // kept in the status over a restart, and the file removed meanwhile: the first scan clears it
      await writeFile(file, v120.subarray(0, 1000));
      await daemon.until('noted again', (_l, s) => noted(s));
      await daemon.stop();
      await unlink(file);
      daemon = startDaemon(config, statusFile);
      await daemon.until('the daemon watches again', (l) => /watching/.test(l));
      await daemon.until(
        'no note of a file gone while the agent was down',
        (_l, s) => s && !noted(s) && s.phase === 'Ready',
      );
    },
  );

  await t.test(
    '5,000 junk *.bundle files: the daemon reads none of them on every poll',
    async (t) => {
      for (let i = 0; i < 5000; i++)
        await writeFile(join(drop, `x-junk-${String(i).padStart(4, '0')}.bundle`), `junk ${i}`);
      await daemon.until('the daemon saw the junk', (l) =>
        /holds 50\d\d \*\.bundle files: only the first 64/.test(l),
      );
      await daemon.until(
        'the daemon judged the junk it looks at',
        (l) => count(l, /x-junk-\d+\.bundle is ignored/g) > 0,
      );
      const io = () =>
        Number(
          /syscr: (\d+)/.exec(
            execFileSync('cat', [`/proc/${daemon.d.child.pid}/io`], { encoding: 'utf8' }),
          )![1],
        );
      const before = io();
      await sleep(3000); // about three polls
      const reads = io() - before;
      t.ok(
        reads < 5000,
        `read calls by the daemon over about three polls: ${reads}, fewer than one per junk file (before the fix: every file's end read on every poll)`,
      );
    },
  );

  await t.test(
    'releases list counts images as the console does, and says of pins what the status says',
    async (t) => {
      const r = await run(AGENT, ['releases', 'list', '--json', '--config', config]);
      t.equal(r.code, 0, r.stderr);
      const view = JSON.parse(r.stdout);
      const row = view.releases.find((x: any) => x.version === '1.2.0');
      t.equal(row.images, 1, 'one image (pulled by a tag and a digest): 1, not 2');
      t.equal(row.imagesPresent, 1);
      const pinned = daemon.d.last.conditions.find((c: any) => c.type === 'Pinned');
      t.equal(
        row.pinned,
        pinned.status === 'True' ? 'yes' : 'unknown',
        `PINNED as the Pinned condition (${pinned.status} ${pinned.reason})`,
      );
      const text = await run(AGENT, ['releases', 'list', '--config', config]);
      t.match(text.stdout, /1\.2\.0\s+amd64\s+\S+\s+1\/1\s/, 'the table counts 1/1');
    },
  );

  await t.test(
    'a forgotten release is not loaded again from the stick still in, over a restart; unforget lets it load',
    async (t) => {
      await daemon.stop();
      const forget = await run(AGENT, ['releases', 'forget', '1.1.0', '--config', config]);
      t.equal(forget.code, 0, forget.stderr);
      daemon = startDaemon(config, statusFile);
      await daemon.until(
        'the daemon decided on the stick',
        (l) =>
          /which was forgotten on this node/.test(l) ||
          /bundle found: \S*usb\/update\.bundle/.test(l),
      );
      t.equal(
        count(daemon.d.log, /bundle found: \S*usb\/update\.bundle/g),
        0,
        "the stick's 1.1.0 is not loaded again",
      );
      // the drop directory still holds the renamed 1.2.0 (and its symlink) and 1.3.0: recorded by identity, not by name
      await daemon.until(
        'the daemon decided on the drop directory',
        (l) => count(l, /was loaded before this start/g) >= 2,
      );
      t.equal(
        count(daemon.d.log, /bundle found/g),
        0,
        'after the restart nothing is loaded again: not the renamed or symlinked bundle either',
      );
      await daemon.until('the status says why', (_l, s) =>
        s?.conditions?.some((c: any) => c.reason === 'ReleaseForgotten'),
      );
      const cond = daemon.d.last.conditions.find((c: any) => c.reason === 'ReleaseForgotten');
      t.match(
        cond.message,
        /1\.1\.0.*releases unforget 1\.1\.0/,
        'the condition names the release and the way back',
      );
      t.match(
        daemon.d.last.message,
        /was not loaded: the administrator removed it/,
        `the technician's line says so: ${daemon.d.last.message}`,
      );
      const listed = JSON.parse(
        (await run(AGENT, ['releases', 'list', '--json', '--config', config])).stdout,
      );
      t.same(
        listed.forgotten.map((f: any) => f.version),
        ['1.1.0'],
        'releases list names it forgotten',
      );

      await daemon.stop();
      const unforget = await run(AGENT, ['releases', 'unforget', '1.1.0', '--config', config]);
      t.equal(unforget.code, 0, unforget.stderr);
      daemon = startDaemon(config, statusFile);
      await daemon.until(
        'loaded again',
        (l) => /bundle found: \S*usb\/update\.bundle/.test(l) && /event=ready/.test(l),
      );
      t.pass("after unforget the stick's release loads");
    },
  );
});
