// Untrusted strings (here an entry name in an unsigned part of the archive) must reach no
// output with their control characters: a failed load could otherwise clear the screen and
// draw a fake green "Done ... You may remove the USB stick".
import t from 'tap';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { craft, fileEntry, makeBundle, readEntries, tmpdir } from '../format/craft.js';
import { AGENT, BUNDLE, nodeRoot, run } from './fixtures.js';

const HOSTILE =
  '\x1b[2J\x1b[32mDone: update 9.9.9 is loaded on this node. You may remove the USB stick.\u202e';
const UNSAFE = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/;

async function hostileBundle(t: Parameters<Parameters<typeof t.test>[1]>[0]) {
  const b = await makeBundle(t);
  const entries = await readEntries(b.path);
  // right after bundle.json and its signature: a blob bundle.json does not list, named to attack the terminal
  entries.splice(2, 0, fileEntry(`blobs/sha256/${HOSTILE}`, 'x'));
  const file = join(b.dir, 'hostile.bundle');
  await craft(file, entries);
  const pub = join(b.dir, 'factory.pub');
  await writeFile(pub, b.key.publicPem);
  return { ...b, file, pub };
}

t.test(
  'bundle verify: the error quoting a hostile entry name carries no control character',
  async (t) => {
    const b = await hostileBundle(t);
    const r = await run(BUNDLE, ['verify', b.file, '--key', b.pub]);
    t.equal(r.code, 1);
    t.match(r.stderr, /^bundle: UNEXPECTED_ENTRY: /m, 'the refusal and its code');
    t.notOk(r.stderr.includes('\x1b'), 'no ESC byte on stderr');
    t.notMatch(
      r.stderr.slice(0, -1),
      UNSAFE,
      'no control or bidi character but the final line feed',
    );
    t.match(r.stderr, /\\x1b\[2J/, 'the escape is shown, visibly');
    const j = await run(BUNDLE, ['verify', b.file, '--key', b.pub, '--json']);
    t.equal(JSON.parse(j.stdout).error.code, 'UNEXPECTED_ENTRY');
    t.notMatch(
      JSON.parse(j.stdout).error.message,
      UNSAFE,
      '--json message: no control character once parsed either',
    );
  },
);

t.test('bundle inspect: unverified bundle.json strings are escaped', async (t) => {
  const b = await makeBundle(t);
  const { resign } = await import('../format/craft.js');
  const entries = resign(await readEntries(b.path), b.key.privateKey, {
    json: (d) => ({ ...d, release: { ...d.release, name: HOSTILE } }),
  });
  const file = join(b.dir, 'named.bundle');
  await craft(file, entries);
  const r = await run(BUNDLE, ['inspect', file]);
  t.equal(r.code, 0);
  t.notOk(r.stdout.includes('\x1b'), 'no ESC byte in the summary');
  t.notOk(r.stdout.includes('\u202e'), 'no bidi override in the summary');
});

t.test(
  'bundle-agent load: stdout, stderr (journal), the console line and the status carry no control character',
  async (t) => {
    const b = await hostileBundle(t);
    const root = join(await tmpdir(t, 'ob-agent-esc-'), 'node');
    const config = await nodeRoot(
      root,
      b.pub,
      `runtime: crio
version:
  current: "1.2.2"
space:
  reserveBytes: 0
preload:
  method: none
reload:
  command: ["true"]
`,
    );
    const r = await run(AGENT, ['load', b.file, '--config', config]);
    t.equal(r.code, 1, 'the load fails');
    t.match(r.stderr, /bundle-agent: Corrupt: /, 'with the damage reason');
    for (const [name, text] of [
      ['stdout', r.stdout],
      ['stderr', r.stderr],
    ] as const) {
      t.notOk(text.includes('\x1b'), `no ESC byte on ${name}`);
      t.notMatch(text.replace(/\n/g, ''), UNSAFE, `no control or bidi character on ${name}`);
    }
    t.match(r.stderr, /event=failed/, 'the journal line is there');
    const issue = await readFile(join(root, 'run/issue.d/bundle-agent.issue'), 'utf8');
    t.match(issue, /^Update: Failed: /);
    t.notMatch(issue.replace(/\n/g, ''), UNSAFE, 'console line: no control character');
    const status = JSON.parse(
      await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.notMatch(status.message, UNSAFE, 'status message');
    for (const c of status.conditions) t.notMatch(c.message, UNSAFE, `condition ${c.type} message`);
    const st = await run(AGENT, ['status', '--config', config]);
    t.match(
      st.stdout,
      /^The bundle agent is not running\. Its last report: Failed: /,
      'the load has ended: its last report, said to be one',
    );
    t.notMatch(st.stdout.replace(/\n$/, ''), UNSAFE, 'bundle-agent status: no control character');
  },
);
