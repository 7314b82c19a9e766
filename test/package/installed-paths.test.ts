// The files bundle-agent's help and man page name are where an installed agent has them (#40
// item 8: they pointed at systemd/config.example.yaml, a path of the repository). The agent
// tarball is built by scripts/package.mjs (amd64) and installed by its install.sh under a
// scratch root; every absolute path the help's "Configuration" paragraph and the man page's
// FILES entry for the example name must exist there. The OCI image carries the same tarball
// under /usr/local, the default prefix. The tarball is the booted-node tests' (test/helpers/
// node.ts packagedAgent, built once per source tree), not built a second time here.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { packagedAgent } from '../helpers/node.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const AGENT = join(ROOT, 'agent/bin/bundle-agent.js');
const VERSION = JSON.parse(await readFile(join(ROOT, 'agent/package.json'), 'utf8'))
  .version as string;

const work = await tmpdir(t, 'ob-installed-');
const agent = await packagedAgent();
t.comment(
  `agent package: ${agent.buildMs ? `built in ${(agent.buildMs / 1000).toFixed(1)} s` : 'cached'}`,
);
const unpacked = join(work, 'unpacked');
await mkdir(unpacked);
execFileSync('tar', ['-xzf', agent.tarball, '-C', unpacked]);
const top = join(unpacked, `bundle-agent-${VERSION}-linux-amd64`);
const root = join(work, 'root');
execFileSync('sh', [join(top, 'install.sh'), '--root', root, '--no-enable'], { stdio: 'ignore' });

const help = execFileSync(process.execPath, [AGENT, '--help'], { encoding: 'utf8' });
const paragraph = help.slice(
  help.indexOf('Configuration:'),
  help.indexOf('\n\n', help.indexOf('Configuration:')),
);

t.test(
  'the help names the installed example and config, not a path of the repository',
  async (t) => {
    t.notMatch(help, /systemd\/config\.example\.yaml/, 'no repository path');
    const paths = [...paragraph.matchAll(/(\/[\w./-]+\.ya?ml)/g)].map((m) => m[1]!);
    t.same(
      paths,
      ['/etc/bundle-agent/config.yaml', '/usr/local/share/bundle-agent/config.example.yaml'],
      paragraph,
    );
    for (const p of paths)
      t.ok(
        existsSync(join(root, p)),
        `${p} exists after install.sh --root (default prefix /usr/local)`,
      );
    t.ok(
      existsSync(join(top, 'share/bundle-agent/config.example.yaml')),
      'the tarball carries it under share/bundle-agent/ (the OCI image has the tarball under /usr/local)',
    );
    t.equal(
      await readFile(join(root, 'usr/local/share/bundle-agent/config.example.yaml'), 'utf8'),
      await readFile(join(ROOT, 'systemd/config.example.yaml'), 'utf8'),
      "the repository's example, as shipped",
    );
  },
);

t.test("the man page's FILES entry for the example is a file the install has", async (t) => {
  const man = execFileSync(process.execPath, [AGENT, 'man'], { encoding: 'utf8' });
  t.notMatch(man, /systemd\/config\.example/);
  const installedMan = await readFile(
    join(root, 'usr/local/share/man/man8/bundle-agent.8'),
    'utf8',
  );
  // roff writes a hyphen as \-
  for (const page of [man, installedMan])
    t.match(
      page.replace(/\\-/g, '-'),
      /^\.TP\n\.I \/usr\/local\/share\/bundle-agent\/config\.example\.yaml\n/m,
      'a FILES entry',
    );
  t.ok(existsSync(join(root, 'usr/local/share/bundle-agent/config.example.yaml')));
});
