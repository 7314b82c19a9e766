// `bundle cluster` against the hostile stand-in API server, the bounds: nesting, pages, items,
// and a redirect that is allowed (slow pages and long messages: hostile-api-slow.test.ts). Each
// ends with one line naming the server, with memory bounded.
import t from 'tap';
import { BUNDLE_BIN, errorCode, bundle, run } from '../builder/lib.js';
import { hostileSetup } from './hostile-api-setup.js';

const { h, kubeconfig, server } = await hostileSetup(t);

t.test(
  'an item nested 1,000,000 arrays deep: refused at level 101 while it arrives, before client-node deserializes it',
  async (t) => {
    h.attack = 'deep';
    const r = await bundle([
      'cluster',
      'status',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '10',
    ]);
    t.equal(errorCode(r.stderr), 'API_TOO_LARGE', r.stderr.slice(0, 300));
    t.match(r.stderr, `the API server ${server} sent an answer nested deeper than 100 levels`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1);
  },
);

t.test(
  'lists are read in pages of 500 (continue tokens followed), and a list that never ends is cut',
  async (t) => {
    h.attack = 'paged';
    h.pages = 0;
    const r = await bundle([
      'cluster',
      'status',
      '--json',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '10',
    ]);
    const j = JSON.parse(r.stdout.split('\n{"error"')[0]!);
    t.equal(j.nodes.length, 1200, 'every node of every page');
    t.equal(h.pages, 6, 'Nodes in 3 pages of 500, 500, 200; the statuses the same');
    h.attack = 'endless-pages';
    const e = await bundle([
      'cluster',
      'status',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '10',
    ]);
    t.equal(errorCode(e.stderr), 'API_TOO_LARGE', e.stderr);
    t.match(e.stderr, /goes on past 800 pages/);
    t.equal(e.stderr.trimEnd().split('\n').length, 1);
  },
);

t.test('a redirect to the same server is followed (same scheme, host and port)', async (t) => {
  h.attack = 'self-redirect';
  const r = await bundle([
    'cluster',
    'status',
    '--json',
    '--kubeconfig',
    kubeconfig,
    '--request-timeout',
    '2',
  ]);
  t.equal(errorCode(r.stderr), 'NODES_NOT_READY', r.stderr);
  t.match(JSON.parse(r.stdout.split('\n{"error"')[0]!), { summary: 'no nodes match' });
});

t.test('--request-timeout refuses what is not a number of seconds', async (t) => {
  const r = await bundle([
    'cluster',
    'status',
    '--kubeconfig',
    kubeconfig,
    '--request-timeout',
    '0',
  ]);
  t.equal(r.code, 2, r.stderr);
});

/** `bundle ARGS` under GNU time: its stderr lines and its peak resident set in MiB (%M, KiB, on the last line). */
async function bundleMaxRss(args: string[]): Promise<{ lines: string[]; maxRssMiB: number }> {
  const r = await run('/usr/bin/time', ['-q', '-f', '%M', process.execPath, BUNDLE_BIN, ...args]);
  const lines = r.stderr.trimEnd().split('\n');
  return { maxRssMiB: Number(lines.pop()) / 1024, lines };
}

t.test(
  'a page of 21,000,000 items when 500 were asked for (60 MiB, under the byte bound): refused while it arrives, memory stays bounded',
  async (t) => {
    // the baseline: the same command reading a correct empty list, under the same runner (coverage costs memory too)
    h.attack = 'self-redirect';
    const base = await bundleMaxRss([
      'cluster',
      'status',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '20',
    ]);
    t.equal(errorCode(base.lines.join('\n')), 'NODES_NOT_READY', base.lines.join('\n'));
    h.attack = 'many-items';
    const r = await bundleMaxRss([
      'cluster',
      'status',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '20',
    ]);
    t.equal(r.lines.length, 1, `one line (${r.lines.join('\n').slice(0, 300)})`);
    t.equal(errorCode(r.lines[0]!), 'API_TOO_LARGE', r.lines[0]);
    t.match(r.lines[0], /sent a list page of over 500 items when asked for 500/);
    t.match(r.lines[0], server);
    t.ok(
      base.maxRssMiB > 0 && r.maxRssMiB < base.maxRssMiB + 100,
      `peak RSS ${r.maxRssMiB.toFixed(0)} MiB, at most 100 MiB over the ${base.maxRssMiB.toFixed(0)} MiB of reading an empty list`,
    );
  },
);
