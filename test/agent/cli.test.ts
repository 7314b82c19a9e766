import t from 'tap';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, run } from './fixtures.js';

t.test('bundle-agent CLI', async (t) => {
  for (const cmd of [
    [],
    ['run'],
    ['load'],
    ['serve'],
    ['status'],
    ['releases'],
    ['releases', 'list'],
    ['releases', 'forget'],
    ['releases', 'unforget'],
    ['releases', 'prune'],
  ]) {
    const r = await run(AGENT, [...cmd, '--help']);
    t.equal(r.code, 0, `${cmd.join(' ') || '(top)'} --help exits 0`);
    t.match(r.stdout, /Usage: bundle-agent/);
  }
  const top = await run(AGENT, ['--help']);
  t.match(top.stdout, /Examples:/, 'the top help teaches with examples');

  t.equal((await run(AGENT, ['load'])).code, 2, 'a missing argument is a usage error (2)');
  t.equal((await run(AGENT, ['bogus'])).code, 2, 'an unknown command is a usage error (2)');
  t.equal(
    (await run(AGENT, ['serve', 'x', '--listen', '0.0.0.0:5000'])).code,
    2,
    'the registry never listens beyond loopback',
  );

  const dir = await tmpdir(t);
  // a path that never existed is the caller's mistake, not a stick that went away
  const typo = await run(AGENT, [
    'load',
    join(dir, 'nonexistent.bundle'),
    '--config',
    join(dir, 'none.yaml'),
  ]);
  t.equal(typo.code, 2, 'load of a missing path: a usage error (2)');
  t.match(typo.stderr, /nonexistent\.bundle does not exist/, `it names the path: ${typo.stderr}`);
  t.notMatch(
    typo.stderr + typo.stdout,
    /USB stick|bundle found|MediaRemoved/,
    'and blames no stick',
  );
  const empty = await run(AGENT, ['load', '', '--config', join(dir, 'none.yaml')]);
  t.equal(empty.code, 2, 'load of an empty path: a usage error (2)');
  t.match(
    empty.stderr,
    /the bundle path is empty/,
    `named as empty, not as the working directory: ${empty.stderr}`,
  );
  t.notMatch(empty.stderr, /is a directory/);
  await writeFile(join(dir, 'images.txt'), 'quay.io/acme/app:v1\n');
  const text = await run(AGENT, [
    'load',
    join(dir, 'images.txt'),
    '--config',
    join(dir, 'none.yaml'),
  ]);
  t.equal(text.code, 2, 'load of a text file: a usage error (2)');
  t.match(
    text.stderr,
    /images\.txt is not a bundle \(it does not start with a zstd frame\)/,
    `named as not a bundle: ${text.stderr}`,
  );
  // zstd data of another kind (a .tar.zst): no bundle.json first, no seek table last
  await writeFile(
    join(dir, 'other.tar.zst'),
    execFileSync('sh', ['-c', `tar -c -C ${dir} images.txt | zstd -q`]),
  );
  const zst = await run(AGENT, [
    'load',
    join(dir, 'other.tar.zst'),
    '--config',
    join(dir, 'none.yaml'),
  ]);
  t.equal(zst.code, 2, 'load of a .tar.zst: a usage error (2)');
  t.match(
    zst.stderr,
    /other\.tar\.zst is not a bundle \(zstd data, but not an archive starting with bundle\.json, and no seek table at its end\)/,
    `named as not a bundle: ${zst.stderr}`,
  );
  const missing = await run(AGENT, ['status', '--config', join(dir, 'none.yaml')]);
  t.equal(missing.code, 1);
  t.match(
    missing.stderr,
    /^bundle-agent: InvalidConfig: cannot read config .*; pass --config FILE\n$/,
    'one line naming cause and fix',
  );

  const cfg = join(dir, 'c.yaml');
  await writeFile(cfg, `root: ${dir}\ntrust:\n  keys: [/k.pub]\nspace:\n  reserveBytes: much\n`);
  const bad = await run(AGENT, ['status', '--config', cfg, '--json']);
  t.equal(bad.code, 1);
  t.match(bad.stderr, /space\.reserveBytes/, 'names the bad key');
  t.equal(JSON.parse(bad.stdout).error.reason, 'InvalidConfig', '--json carries the reason');

  await writeFile(cfg, `root: ${dir}\ntrust:\n  keys: [/k.pub]\n`);
  const none = await run(AGENT, ['status', '--config', cfg, '--json']);
  t.equal(
    none.code,
    3,
    'no status file yet: the agent never ran, exit 3 as systemctl status says of a stopped unit',
  );
  t.equal(JSON.parse(none.stdout).phase, 'Idle', 'no status file yet: Idle');
  t.equal(JSON.parse(none.stdout).agent, 'stopped');
  const plain = await run(AGENT, ['status', '--config', cfg]);
  t.equal(plain.stdout, 'The bundle agent is not running.\n');
});
