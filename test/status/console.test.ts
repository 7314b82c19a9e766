// tier: unit
// The technician's line on the node's console: /run/issue.d/bundle-agent.issue under a
// temporary root, replaced atomically (new inode by rename, no temp file left) and only when
// the text changes.
import { readdir, readFile, stat, utimes, writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import {
  consoleFilePath,
  consoleText,
  ConsoleWriter,
  emptyStatus,
  StatusTracker,
} from '@offline-bundle/status';
import { fixedClock, loadSequence, tmpdir } from './lib.js';

t.test(
  'the console file holds the current sentence, rewritten atomically only on change',
  async (t) => {
    const root = await tmpdir(t, 'ob-console-');
    const written: string[] = [];
    const w = new ConsoleWriter({ root, onWritten: (text) => written.push(text) });
    t.equal(w.path, path.join(root, 'run/issue.d/bundle-agent.issue'));
    t.equal(consoleFilePath(root), w.path);

    t.equal(await w.write('Waiting for a USB stick with an update bundle.'), true, 'first write');
    t.equal(
      await readFile(w.path, 'utf8'),
      'Update: Waiting for a USB stick with an update bundle.\n\n',
    );
    const first = await stat(w.path);
    t.equal(first.mode & 0o777, 0o644);

    t.equal(
      await w.write('Waiting for a USB stick with an update bundle.'),
      false,
      'same text: not written',
    );
    const same = await stat(w.path);
    t.equal(same.ino, first.ino, 'same file (no rewrite)');
    t.equal(same.mtimeMs, first.mtimeMs);

    t.equal(
      await w.write('Copying 7.1 of 18.4 GB, about 3 min left. Do not remove the USB stick.'),
      true,
    );
    const changed = await stat(w.path);
    t.not(changed.ino, first.ino, 'replaced by rename (a new inode), never rewritten in place');
    t.equal(
      await readFile(w.path, 'utf8'),
      'Update: Copying 7.1 of 18.4 GB, about 3 min left. Do not remove the USB stick.\n\n',
    );
    t.same(await readdir(path.dirname(w.path)), ['bundle-agent.issue'], 'no temporary file left');
    t.equal(written.length, 2);

    // After a restart, a file that already says the same is left alone.
    const w2 = new ConsoleWriter({ root });
    t.equal(
      await w2.write('Copying 7.1 of 18.4 GB, about 3 min left. Do not remove the USB stick.'),
      false,
    );
    t.equal((await stat(w.path)).ino, changed.ino);
  },
);

t.test('a tracker sink keeps the console in step with the status, in order', async (t) => {
  const root = await tmpdir(t, 'ob-console-');
  const w = new ConsoleWriter({ root, onError: (e) => t.fail(String(e)) });
  const tracker = new StatusTracker(emptyStatus('worker-1'), fixedClock());
  const lines: string[] = [];
  const writes: string[] = [];
  const w2 = new ConsoleWriter({ root: path.join(root, 'b'), onWritten: (x) => writes.push(x) });
  tracker.onChange(w.sink);
  tracker.onChange(w2.sink);
  tracker.onChange((s) => lines.push(s.message));
  for (const s of loadSequence().slice(1))
    tracker.update((x) => Object.assign(x, structuredClone(s)));
  await w.idle();
  await w2.idle();
  t.equal(await readFile(w.path, 'utf8'), consoleText(tracker.current.message));
  t.match(
    tracker.current.message,
    /^Done: update 4\.15\.1 is loaded on this node\. You may remove the USB stick\.$/,
  );
  const distinct = lines.filter((l, i) => i === 0 || l !== lines[i - 1]).length;
  t.equal(
    writes.length,
    distinct,
    `${lines.length} status changes, ${distinct} different sentences, ${writes.length} writes`,
  );
  t.ok(writes.length < lines.length, 'unchanged sentences are not written');
});

t.test('console text is safe for agetty and terminals', async (t) => {
  t.equal(
    consoleText('Failed: bad file \u001b[2J\u001b]0;owned\u0007 on C:\\stick\u202e\nnext'),
    'Update: Failed: bad file \\\\x1b[2J\\\\x1b]0;owned\\\\x07 on C:\\\\stick\\\\u202e\\\\x0anext\n\n',
    'control and bidi characters shown as escapes, backslashes doubled (agetty)',
  );
  const root = await tmpdir(t, 'ob-console-');
  // A read-only place: the sink reports the error and does not throw.
  await mkdir(path.join(root, 'run'), { recursive: true });
  await writeFile(path.join(root, 'run', 'issue.d'), 'not a directory');
  const errors: unknown[] = [];
  const w = new ConsoleWriter({ root, onError: (e) => errors.push(e) });
  w.sink(emptyStatus('worker-1'));
  await w.idle();
  t.equal(errors.length, 1, 'error reported to onError');
  await t.rejects(w.write('x'));
});

t.test('each new line asks the running agettys to redraw, as agetty --reload does', async (t) => {
  const root = await tmpdir(t, 'ob-console-');
  const reload = path.join(root, 'run/agetty.reload');
  const w = new ConsoleWriter({ root });
  await w.write('Waiting for a USB stick with an update bundle.');
  const first = await stat(reload);
  t.equal(first.mode & 0o777, 0o600, 'created as agetty creates it');
  t.equal(first.size, 0, 'empty: only its times count');
  // agetty watches the file's attributes: a new sentence must move its mtime on
  const past = new Date(Date.now() - 60_000);
  await utimes(reload, past, past);
  await w.write('Waiting for a USB stick with an update bundle.');
  t.ok((await stat(reload)).mtimeMs < past.getTime() + 1000, 'same sentence: agetty is left alone');
  await w.write('Copying 1.0 of 2.0 GB. Do not remove the USB stick.');
  t.ok(
    (await stat(reload)).mtimeMs > past.getTime() + 30_000,
    'new sentence: the reload file was touched',
  );
});

t.test(
  'the line of an older agent in /etc/issue.d (it survived reboots) is removed; a file not ours stays',
  async (t) => {
    const root = await tmpdir(t, 'ob-console-');
    const old = path.join(root, 'etc/issue.d/bundle-agent.issue');
    await mkdir(path.dirname(old), { recursive: true });
    await writeFile(old, consoleText('Copying 1.0 of 2.0 GB. Do not remove the USB stick.'));
    const w = new ConsoleWriter({ root });
    await w.write('Waiting for a USB stick with an update bundle.');
    await t.rejects(stat(old), { code: 'ENOENT' }, 'the stale line is gone');
    t.match(
      await readFile(path.join(root, 'run/issue.d/bundle-agent.issue'), 'utf8'),
      /^Update: Waiting/,
      'the line lives under /run',
    );

    const root2 = await tmpdir(t, 'ob-console-');
    const foreign = path.join(root2, 'etc/issue.d/bundle-agent.issue');
    await mkdir(path.dirname(foreign), { recursive: true });
    await writeFile(foreign, 'Welcome to site 7\n');
    await new ConsoleWriter({ root: root2 }).write(
      'Waiting for a USB stick with an update bundle.',
    );
    t.equal(
      await readFile(foreign, 'utf8'),
      'Welcome to site 7\n',
      'a file we did not write is left alone',
    );
  },
);
