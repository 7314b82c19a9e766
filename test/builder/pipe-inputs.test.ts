// --passphrase-file and --images-file take a pipe (`<(pass show key)`, stdin fed by one, `-` for
// stdin), still bounded in size; an empty passphrase file says so (create and keygen) instead of
// "wrong passphrase" or an unencrypted key.
import t from 'tap';
import { readdir, readlink, writeFile } from 'node:fs/promises';
import { execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, errorCode, listDir, q, refNames, run, BUNDLE_BIN } from './lib.js';
import { until } from '../helpers/until.js';

const work = await tmpdir(t, 'ob-pipes-');
const pass = path.join(work, 'pass.txt');
await writeFile(pass, 'correct horse\n');
const k = await bundle(['keygen', '--out', path.join(work, 'enc'), '--passphrase-file', pass]);
if (k.code !== 0) throw new Error(k.stderr);
const key = path.join(work, 'enc.key');
const layout = path.join(work, 'layout');
await writeImageLayout(layout, {
  tag: 'v1',
  platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'srv/a': 'a' }] }],
});
const image = `oci:${layout}:v1=registry.example.com/app:v1`;
const cache = path.join(work, 'cache');
/** Whether process `pid` has `file` open (one of its /proc/PID/fd links points there). */
async function holdsOpen(pid: number, file: string): Promise<boolean> {
  const fds = await readdir(`/proc/${pid}/fd`).catch(() => []);
  return (
    await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')))
  ).includes(file);
}
/** `bundle ARGS` under bash, for process substitution. */
const viaBash = (args: string, input?: string) =>
  run(
    'bash',
    ['-c', `${q(process.execPath)} ${q(BUNDLE_BIN)} ${args}`],
    input !== undefined ? { input } : {},
  );

t.test('--passphrase-file <(cmd)', async (t) => {
  const out = path.join(work, 'a.bundle');
  const r = await viaBash(
    `create --quiet --version 1.0 --image ${q(image)} --key ${q(key)} --cache ${q(cache)} -o ${q(out)} --passphrase-file <(printf 'correct horse\\n')`,
  );
  t.equal(r.code, 0, r.stderr);
  t.same(await refNames(out), ['registry.example.com/app:v1']);
  const big = await viaBash(
    `create --quiet --version 1.0 --image ${q(image)} --key ${q(key)} --cache ${q(cache)} -o ${q(path.join(work, 'b.bundle'))} --passphrase-file <(yes | head -c 10000)`,
  );
  t.equal(big.code, 1);
  t.equal(errorCode(big.stderr), 'KEY_ERROR');
  t.match(big.stderr, /gave over 4096 bytes/, 'still bounded');
});

t.test('--images-file - (stdin) and --images-file <(cmd)', async (t) => {
  const out = path.join(work, 'stdin.bundle');
  // a shell's pipe (node's own stdin pipes are sockets)
  const r = await run('bash', [
    '-c',
    `printf '# list\\n%s\\n' ${q(image)} | ${q(process.execPath)} ${q(BUNDLE_BIN)} create --quiet --version 1.0 --images-file - --key ${q(key)} --passphrase-file ${q(pass)} --cache ${q(cache)} -o ${q(out)}`,
  ]);
  t.equal(r.code, 0, r.stderr);
  t.same(await refNames(out), ['registry.example.com/app:v1']);
  const dup = await run('bash', [
    '-c',
    `printf '%s\\n\\n%s\\n' ${q(image)} ${q(image.replace(':v1=', ':v2='))} | ${q(process.execPath)} ${q(BUNDLE_BIN)} create --quiet --version 1.0 --images-file - --key ${q(key)} --passphrase-file ${q(pass)} --cache ${q(cache)} -o ${q(path.join(work, 'dup.bundle'))}`,
  ]);
  t.equal(dup.code, 1);
  t.match(dup.stderr, /stdin:3/, 'stdin lines are named stdin:N');
  const out2 = path.join(work, 'subst.bundle');
  const s = await viaBash(
    `create --quiet --version 1.0 --images-file <(printf '%s\\n' ${q(image)}) --key ${q(key)} --passphrase-file ${q(pass)} --cache ${q(cache)} -o ${q(out2)}`,
  );
  t.equal(s.code, 0, s.stderr);
  t.same(await refNames(out2), ['registry.example.com/app:v1']);
});

t.test('an empty passphrase file: "is empty", for create and keygen', async (t) => {
  const empty = path.join(work, 'empty.txt');
  await writeFile(empty, '');
  const r = await bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--key',
    key,
    '--cache',
    cache,
    '-o',
    path.join(work, 'e.bundle'),
    '--passphrase-file',
    empty,
  ]);
  t.equal(r.code, 1);
  t.equal(errorCode(r.stderr), 'KEY_ERROR');
  t.match(r.stderr, `the passphrase file ${empty} is empty`);
  t.notMatch(r.stderr, /wrong passphrase/);
  const dir = path.join(work, 'kg');
  const g = await bundle([
    'keygen',
    '--out',
    path.join(work, 'kg-key'),
    '--passphrase-file',
    empty,
  ]);
  t.equal(g.code, 1);
  t.match(g.stderr, `the passphrase file ${empty} is empty`);
  t.same(
    (await listDir(work)).filter((f) => f.startsWith('kg-key')),
    [],
    'no key written',
  );
  t.same(await listDir(dir), []);
  const blank = await viaBash(
    `keygen --out ${q(path.join(work, 'kg2'))} --passphrase-file <(printf '')`,
  );
  t.equal(blank.code, 1, 'an empty <(cmd) ends at once');
  t.match(blank.stderr, /is empty/);
});

t.test('a FIFO whose writer never ends: refused after the time bound, not a hang', async (t) => {
  const fifo = path.join(work, 'never.fifo');
  execFileSync('mkfifo', [fifo]);
  // a writer that holds the FIFO open and writes nothing
  const writer = spawn('sh', ['-c', `exec sleep 60 > ${q(fifo)}`], { stdio: 'ignore' });
  t.teardown(() => {
    writer.kill('SIGKILL');
  });
  const started = Date.now();
  const r = await bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--key',
    key,
    '--cache',
    cache,
    '-o',
    path.join(work, 'never.bundle'),
    '--passphrase-file',
    fifo,
  ]);
  t.equal(r.code, 1);
  t.equal(errorCode(r.stderr), 'INPUT_TIMEOUT', 'a time-out, not a bad key');
  t.match(
    r.stderr,
    `cannot read the passphrase file ${fifo}: ${fifo} is a pipe that gave no end within 10 s`,
  );
  t.ok(Date.now() - started < 25_000, `bounded (${Date.now() - started} ms)`);
});

t.test(
  'a FIFO nobody writes: INPUT_TIMEOUT naming it (never an empty list or passphrase), nothing written',
  async (t) => {
    const fifo = path.join(work, 'nobody.fifo');
    execFileSync('mkfifo', [fifo]);
    const imagesOut = path.join(work, 'nobody-images.bundle');
    const passOut = path.join(work, 'nobody-pass.bundle');
    // both callers at once: the one bound serves --images-file and --passphrase-file
    const [images, passphrase] = await Promise.all([
      bundle([
        'create',
        '--version',
        '1.0',
        '--image',
        image,
        '--images-file',
        fifo,
        '--key',
        key,
        '--passphrase-file',
        pass,
        '--cache',
        cache,
        '-o',
        imagesOut,
      ]),
      bundle([
        'create',
        '--version',
        '1.0',
        '--image',
        image,
        '--key',
        key,
        '--passphrase-file',
        fifo,
        '--cache',
        cache,
        '-o',
        passOut,
      ]),
    ]);
    for (const [r, what] of [
      [images, '--images-file'],
      [passphrase, 'the passphrase file'],
    ] as const) {
      t.equal(r.code, 1, what);
      t.equal(r.stderr.trimEnd().split('\n').length, 1, `one line: ${r.stderr}`);
      t.equal(errorCode(r.stderr), 'INPUT_TIMEOUT', what);
      t.match(
        r.stderr,
        `cannot read ${what} ${fifo}: ${fifo} is a pipe nothing wrote to within 10 s`,
      );
    }
    t.same(
      (await listDir(work)).filter((f) => f.startsWith('nobody-')),
      [],
      'no bundle written',
    );
  },
);

t.test(
  'SIGTERM or SIGINT while waiting on a FIFO nobody writes: the run stops then, not at the time bound',
  async (t) => {
    const fifo = path.join(work, 'wait.fifo');
    execFileSync('mkfifo', [fifo]);
    for (const [signal, exit] of [
      ['SIGTERM', 143],
      ['SIGINT', 130],
    ] as const) {
      for (const flag of ['--images-file', '--passphrase-file']) {
        const args =
          flag === '--images-file'
            ? ['--image', image, '--images-file', fifo, '--passphrase-file', pass]
            : ['--image', image, '--passphrase-file', fifo];
        const child = spawn(
          process.execPath,
          [
            BUNDLE_BIN,
            'create',
            '--version',
            '1.0',
            ...args,
            '--key',
            key,
            '--cache',
            cache,
            '-o',
            path.join(work, 'wait.bundle'),
          ],
          { stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => {
          stderr += d;
        });
        let done = false;
        const exited = new Promise<number | null>((res) =>
          child.on('close', (code) => {
            done = true;
            res(code);
          }),
        );
        // waiting: the process holds the FIFO open (it reads it non-blocking, polling)
        await until(
          'the process holds the FIFO open, or ended',
          async () => done || (await holdsOpen(child.pid!, fifo)),
          { stepMs: 50 },
        );
        const sent = Date.now();
        child.kill(signal);
        const code = await exited;
        const took = Date.now() - sent;
        t.equal(
          code,
          exit,
          `${flag}, ${signal}: exit ${exit}, ${took} ms after the signal: ${stderr}`,
        );
        // a run that waited out the 10 s bound ends INPUT_TIMEOUT (the bound is checked before the signal), one that went on with an empty list does not end INTERRUPTED
        t.equal(
          errorCode(stderr),
          'INTERRUPTED',
          `${flag}, ${signal}: stopped by the signal, not the bound`,
        );
      }
    }
    t.same(
      (await listDir(work)).filter((f) => f.startsWith('wait.bundle')),
      [],
      'no bundle written',
    );
  },
);
