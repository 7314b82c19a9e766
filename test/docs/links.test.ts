// tier: unit
// The README is the front door (issue #41, "Docs that lead"): short enough to read, and every
// page under docs/ reachable from it; no link in the README or in docs/ leads to a file or a
// heading that is not there (a section moved or renamed leaves its old links dangling).
import t from 'tap';
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { ROOT, anchors, docFiles, readDoc, relativeLinks } from '../helpers/docs.js';

const README_MAX_LINES = 400;

t.test(`README.md is a front door: under ${README_MAX_LINES} lines`, async (t) => {
  const lines = readDoc('README.md').split('\n').length;
  t.ok(lines < README_MAX_LINES, `README.md has ${lines} lines`);
});

t.test('the two commands stay at the top of README.md, as CI and the guide run them', async (t) => {
  const readme = readDoc('README.md');
  const top = readme.slice(0, readme.indexOf('\n## '));
  t.ok(
    top.includes(
      'bash scripts/setup.sh && pnpm demo     # set up, then build a bundle from generated images and load it through the agent\n',
    ),
    'the set-up and demo command',
  );
  t.ok(
    top.includes(
      'bash scripts/setup.sh && pnpm lint && pnpm test   # set up, lint, then run every test (ends with "N passed, N failed")\n',
    ),
    'the test command',
  );
});

t.test('every docs/*.md is linked from README.md', async (t) => {
  const linked = new Set(
    relativeLinks(readDoc('README.md')).map((u) => path.normalize(u.split('#')[0]!)),
  );
  const pages = docFiles().filter((f) => f !== 'README.md');
  t.ok(pages.length >= 10, `the pages: ${pages.join(', ')}`);
  for (const page of pages) t.ok(linked.has(page), `README.md links ${page}`);
});

t.test(
  'every relative link in README.md and docs/*.md resolves to a file and, for a page, a heading',
  async (t) => {
    let checked = 0;
    for (const file of docFiles()) {
      const text = readDoc(file);
      for (const link of relativeLinks(text)) {
        const [target, anchor] = link.split('#') as [string, string | undefined];
        const resolved =
          target === ''
            ? file
            : path.normalize(path.join(path.dirname(file), decodeURIComponent(target)));
        const where = `${file}: ${link}`;
        checked++;
        if (!existsSync(path.join(ROOT, resolved))) {
          t.fail(`${where}: ${resolved} does not exist`);
          continue;
        }
        if (anchor === undefined) continue;
        if (!resolved.endsWith('.md') || !statSync(path.join(ROOT, resolved)).isFile()) {
          t.fail(`${where}: an anchor into a file that is not a page`);
          continue;
        }
        t.ok(
          anchors(target === '' ? text : readDoc(resolved)).has(anchor),
          `${where}: ${resolved} has the heading #${anchor}`,
        );
      }
    }
    t.ok(checked > 50, `${checked} links checked`);
  },
);
