// deploy/openshift/switch-guard.sh against hostile markers (issue 28 item 6), run by the real
// /bin/sh (dash) and by bash: numbers sh's arithmetic would refuse ("Illegal number" before any
// rollback, at every start), a rollback target that is not our repository by digest, symlinks
// and devices where the guard reads or writes. systemctl/systemd-run are recording scripts, as
// in self-upgrade-boot-guard.test.ts.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, readdir, symlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { renderImageDropIn } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';

const GUARD = new URL('../../deploy/openshift/switch-guard.sh', import.meta.url).pathname;
const REPO = 'localhost/offline-bundle/bundle-agent';
const dg = (c: string) => `sha256:${c.repeat(64)}`;
const ref = (c: string) => `${REPO}@${dg(c)}`;

async function host(t: Tap.Test, shell: string) {
  const dir = await tmpdir(t, 'ob-guard-hostile-');
  const state = join(dir, 'state');
  const dropInDir = join(dir, 'bundle-agent.container.d');
  const bin = join(dir, 'bin');
  await Promise.all([state, dropInDir, bin].map((d) => mkdir(d, { recursive: true })));
  const calls = join(dir, 'calls.log');
  for (const cmd of ['systemctl', 'systemd-run']) {
    await writeFile(join(bin, cmd), `#!/bin/sh\necho "${cmd} $*" >> ${calls}\n`);
    await chmod(join(bin, cmd), 0o755);
  }
  const file = join(dropInDir, 'image.conf');
  const marker = join(state, 'agent-switch.pending');
  const starts = join(state, 'agent-switch.starts');
  await writeFile(file, renderImageDropIn(ref('b')));
  return {
    dir,
    state,
    dropInDir,
    file,
    marker,
    starts,
    // a bound only so that a guard that hangs fails this test instead of stalling the suite
    guard: () => {
      const r = spawnSync(shell, [GUARD, state, dropInDir, 'bundle-agent'], {
        env: { PATH: `${bin}:/usr/bin:/bin` },
        encoding: 'utf8',
        timeout: 30_000,
      });
      return { code: r.status, stderr: r.stderr, hung: r.signal !== null };
    },
    pending: async (window: string, previous: string, ageSeconds: number) => {
      await writeFile(marker, `${dg('b')}\n${window}\n${previous}\n`);
      const then = new Date(Date.now() - ageSeconds * 1000);
      await utimes(marker, then, then);
    },
    calls: async () => (await readFile(calls, 'utf8').catch(() => '')).split('\n').filter(Boolean),
  };
}

for (const shell of ['/bin/sh', '/bin/bash']) {
  t.test(`${shell}: a window of 099 is 99 seconds, not "Illegal number"`, async (t) => {
    const h = await host(t, shell);
    await h.pending('099', ref('a'), 50);
    const r = h.guard();
    t.equal(r.code, 0, r.stderr);
    t.notMatch(r.stderr, /Illegal|bad number|invalid/i);
    t.match((await h.calls())[0], /--on-active=(48|49)s /, 'the timer for the rest of 99 s');
    await h.pending('099', ref('a'), 120);
    t.equal(h.guard().code, 1, 'past 99 s: rolled back, this start failed');
    t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
  });

  t.test(
    `${shell}: windows of 20 digits, of letters, of 0000: bounded, never an sh error`,
    async (t) => {
      for (const [window, age, code] of [
        ['9'.repeat(20), 100, 0],
        ['soon', 100, 0],
        ['0000', 100, 1],
        ['-5', 100, 0],
      ] as const) {
        const h = await host(t, shell);
        await h.pending(window, ref('a'), age);
        const r = h.guard();
        t.equal(r.code, code, `window ${window}: ${r.stderr}`);
        t.notMatch(r.stderr, /Illegal|bad number|out of range/i);
      }
    },
  );

  t.test(
    `${shell}: a start count of 20 digits, of garbage, or a symlink to /dev/zero: this start rolls back`,
    async (t) => {
      for (const count of ['9'.repeat(20), 'x', '0099999999999', '/dev/zero']) {
        const h = await host(t, shell);
        await h.pending('600', ref('a'), 10);
        if (count === '/dev/zero') await symlink('/dev/zero', h.starts);
        else await writeFile(h.starts, `${count}\n`);
        const r = h.guard();
        t.notOk(r.hung, `${count}: ended`);
        t.equal(r.code, 1, `${count}: rolled back (${r.stderr.trim()})`);
        t.notMatch(r.stderr, /Illegal|bad number/i);
        t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
      }
      const h = await host(t, shell);
      await h.pending('600', ref('a'), 10);
      await writeFile(h.starts, '0003\n');
      t.equal(h.guard().code, 0, 'a count with leading zeros is read as 3');
      t.equal((await readFile(h.starts, 'utf8')).trim(), '4');
    },
  );

  t.test(
    `${shell}: only our repository by digest is put back; anything else puts the unit's own image back`,
    async (t) => {
      for (const previous of [
        'evil.example.com/backdoor:latest',
        `${REPO}:0.5.0`,
        `${REPO}@sha256:${'a'.repeat(63)}`,
        `${REPO}@sha256:${'A'.repeat(64)}`,
      ]) {
        const h = await host(t, shell);
        await h.pending('600', previous, 3600);
        t.equal(h.guard().code, 1);
        await t.rejects(
          readFile(h.file),
          { code: 'ENOENT' },
          `${previous}: the drop-in removed, never Image=${previous}`,
        );
      }
    },
  );

  t.test(
    `${shell}: never writes through a symlink (the old fixed temporary names, or anywhere else)`,
    async (t) => {
      const h = await host(t, shell);
      const victims = ['v1', 'v2'].map((v) => join(h.dir, v));
      for (const v of victims) await writeFile(v, 'precious');
      await symlink(victims[0]!, `${h.starts}.tmp`);
      await symlink(victims[1]!, `${h.file}.rollback`);
      await h.pending('600', ref('a'), 10);
      t.equal(h.guard().code, 0);
      t.equal((await readFile(h.starts, 'utf8')).trim(), '1');
      await h.pending('600', ref('a'), 3600);
      t.equal(h.guard().code, 1);
      t.equal(await readFile(h.file, 'utf8'), renderImageDropIn(ref('a')));
      for (const v of victims) t.equal(await readFile(v, 'utf8'), 'precious', `${v} untouched`);
      t.strictSame(
        (await readdir(h.dropInDir)).filter((n) => n.startsWith('.image.conf.')),
        [],
        'no temporary file left',
      );
    },
  );

  t.test(`${shell}: a marker that is a FIFO or a symlink: ignored at once`, async (t) => {
    const h = await host(t, shell);
    spawnSync('mkfifo', [h.marker]);
    const r = h.guard();
    t.notOk(r.hung);
    t.equal(r.code, 0);
    const h2 = await host(t, shell);
    await writeFile(join(h2.dir, 'm'), `${dg('b')}\n600\n-\n`);
    await symlink(join(h2.dir, 'm'), h2.marker);
    t.equal(h2.guard().code, 0);
    t.equal(await readFile(h2.file, 'utf8'), renderImageDropIn(ref('b')), 'nothing changed');
  });
}
