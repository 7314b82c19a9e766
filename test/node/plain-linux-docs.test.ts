// docs/install.md's plain-Linux commands, copied as written (issue #39, "Done when"): a booted
// Debian node (test/helpers/node.ts: its own systemd 257 under systemd-nspawn, no route beyond
// its bridge) with Debian's containerd as installed (its stock /etc/containerd/config.toml,
// registry config_path ""), a directory holding the agent tarball `pnpm package` built, under
// the name the docs give it, and the factory's public key. The blocks marked `run=plain-linux`
// (test/helpers/docs.ts, runBlocks) run in page order, each as `bash -euo pipefail FILE` through
// the node's systemd, starting where the one before ended (a reader's terminal keeps its `cd`;
// nothing else carries over). The one change made to a block is the placeholder the docs tell
// the reader to fill: `<running-version>`, the release the node runs. A stick (a loop-mounted
// ext4 image) holding a bundle signed by the factory's key is plugged in before the first block
// marked `after=stick`, and that block (`bundle-agent status`) is read again, as a technician
// would, until it says "Done … You may remove the USB stick"; the pins are then read back from
// containerd (`ctr -n k8s.io images ls`, the label the agent set through containerd's API).
// Then the same commands with the containerd step skipped (install.sh without
// --configure-containerd --restart-containerd): the load is refused with RuntimeIgnoresMirror
// before anything is copied, in one line naming config_path.
//
// Substitutions: udev does not run in a container, so the stick is attached where the shipped
// rule's systemd-mount puts it (/run/media/bundle-agent/<device>), read-only; the node is a
// Debian trixie root (the harness's, shared with test/node/*).
import t from 'tap';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { keygen, makeBundle } from '../agent/fixtures.js';
import { markedBlocks, runBlocks, type RunBlock } from '../helpers/docs.js';
import {
  bootNode,
  buildRoot,
  makeBridge,
  nodeSkipReason,
  packagedAgent,
  type Node,
} from '../helpers/node.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { until } from '../helpers/until.js';
import { makeStick } from './openshift-node.js';

const DOC = 'docs/install.md';
const GROUP = 'plain-linux';
const RUNNING = '4.15.1';
const UPDATE = '4.15.2';
const ORIGIN = 'origin.offline-bundle.invalid';
const IMAGES = [`${ORIGIN}/acme/app:v1`, `${ORIGIN}/acme/tool:v2`];
/** Where the reader stands: the agent tarball and factory.pub, as the docs' first line assumes. */
const SITE_DIR = '/root/site';
/** The host directory of block scripts, bound read-only into the node here. */
const BLOCKS_DIR = '/opt/docs-blocks';
const CWD_FILE = '/run/docs-cwd';
const SKIPPED_CONTAINERD_STEP = ' --configure-containerd --restart-containerd';

/** What runAsWritten reports through. */
type Asserts = { equal(...a: unknown[]): void };

const DONE = /^Done: update .* is loaded on this node\. You may remove the USB stick\.$/m;

t.test(
  `${DOC}: the plain-Linux blocks are marked, and the extractor holds the page and the test to each other`,
  async (t) => {
    const blocks = runBlocks(DOC, GROUP, { 'running-version': RUNNING });
    t.ok(blocks.length >= 2, `${blocks.length} blocks marked run=${GROUP}`);
    t.match(
      blocks[0]!.code,
      /^tar -xzf bundle-agent-\S+-linux-amd64\.tar\.gz && cd /m,
      'the first unpacks the agent tarball',
    );
    t.ok(
      blocks.some((b) => b.code.includes('--configure-containerd')),
      "one configures containerd's config_path",
    );
    t.equal(blocks.at(-1)!.after, 'stick', 'the last runs once the stick is in');
    t.match(blocks.at(-1)!.code, /^bundle-agent status\b/m, 'and reads the status');
    t.notMatch(
      blocks.map((b) => b.code).join(''),
      /<running-version>/,
      'the placeholder is filled',
    );

    const page = (info: string, body = 'echo <x>') => `# p\n\n\`\`\`${info}\n${body}\n\`\`\`\n`;
    t.throws(
      () => runBlocks('p.md', 'g', {}, page('sh run=g')),
      /p\.md:3: the block has the placeholder <x>, which the test does not fill/,
      'a placeholder the test does not fill',
    );
    t.throws(
      () => runBlocks('p.md', 'g', { x: '1', y: '2' }, page('sh run=g')),
      /no block marked run=g has the placeholder <y>/,
      'a value no placeholder uses',
    );
    t.throws(
      () => runBlocks('p.md', 'h', { x: '1' }, page('sh run=g')),
      /no block marked run=h/,
      'a group with no block',
    );
    t.throws(
      () => markedBlocks('p.md', page('yaml run=g')),
      /p\.md:3: a block marked run= must be ```sh/,
      'a marked block in another language',
    );
    t.throws(
      () => markedBlocks('p.md', page('sh run=g after=reboot')),
      /"after=reboot" in the fence/,
      'an unknown attribute value',
    );
    t.throws(
      () => markedBlocks('p.md', '```sh run=g\necho\n'),
      /never closed/,
      'an unclosed fence',
    );
    t.same(
      runBlocks(
        'p.md',
        'g',
        { x: '1' },
        `- item\n\n  \`\`\`sh run=g after=stick\n  echo <x>\n  \`\`\`\n`,
      ),
      [{ file: 'p.md', line: 3, group: 'g', after: 'stick', code: 'echo 1\n' }],
      'a block in a list item: its indentation taken off',
    );
  },
);

/** Runs `blocks` in the node as written, each in the directory the one before ended in; plugs `stick` before the first `after=stick` block. */
async function runAsWritten(
  t: Asserts,
  node: Node,
  hostBlocks: string,
  blocks: RunBlock[],
  plug: () => Promise<unknown>,
) {
  let plugged = false;
  const outputs: string[] = [];
  for (const [i, b] of blocks.entries()) {
    if (b.after === 'stick' && !plugged) {
      await plug();
      plugged = true;
    }
    const cwd = i === 0 ? SITE_DIR : (await node.must(['cat', CWD_FILE])).trim();
    // a file, not an argument: systemd-run would expand $VAR in a command line
    writeFileSync(join(hostBlocks, `${i}.sh`), `cd '${cwd}'\n${b.code}pwd > ${CWD_FILE}\n`);
    const r = await node.run(['bash', '-euo', 'pipefail', `${BLOCKS_DIR}/${i}.sh`], {
      timeoutMs: 240_000,
    });
    outputs.push(r.stdout);
    if (b.after === 'stick') continue; // the status block is read again by the caller
    t.equal(
      r.code,
      0,
      `${b.file}:${b.line} ran as written${r.code ? `: exit ${r.code}: ${(r.stderr || r.stdout).trim().slice(-1500)}` : ''}`,
    );
    if (r.code) throw new Error(`${b.file}:${b.line} failed`);
  }
  return outputs;
}

/** Reads the status block (the page's last) until its line settles: Done, or the status file says Failed. */
async function readStatusUntilSettled(node: Node, index: number, diag: () => Promise<string>) {
  return until(
    'the status block says Done, or the load failed',
    async () => {
      const r = await node.run(['bash', '-euo', 'pipefail', `${BLOCKS_DIR}/${index}.sh`]);
      if (DONE.test(r.stdout)) return { ...r, failed: false };
      const s = await node.run(['cat', '/var/lib/bundle-agent/status.json']);
      return s.code === 0 && JSON.parse(s.stdout).phase === 'Failed'
        ? { ...r, failed: true }
        : undefined;
    },
    { timeoutMs: 240_000, stepMs: 1000, detail: diag },
  );
}

const skip = nodeSkipReason();
if (skip)
  t.test('booted node', async (t) => {
    t.plan(0, skip);
  });
else {
  // the agent packaging (shared with test/node/*: 70-100 s when the sources changed), then ~35 s: two boots and loads
  t.setTimeout(1_500_000);
  t.test(
    "docs/install.md plain Linux in a booted node with Debian's containerd as installed",
    async (t) => {
      const began = Date.now();
      const [root, agent] = [await buildRoot(), await packagedAgent()];
      t.comment(
        `node root: ${root.buildMs ? `built in ${(root.buildMs / 1000).toFixed(1)} s` : 'cached'}; agent package: ${agent.buildMs ? `built in ${(agent.buildMs / 1000).toFixed(1)} s` : 'cached'}`,
      );
      const dir = await tmpdir(t, 'ob-node-docs-');
      const keys = await keygen(dir);
      const bundleFile = join(dir, `ocp-${UPDATE}.bundle`);
      await makeBundle(dir, {
        key: keys.key,
        version: UPDATE,
        upgradeFrom: [RUNNING],
        out: bundleFile,
        images: [
          { name: IMAGES[0]!, files: { 'app.txt': 'app v1' } },
          { name: IMAGES[1]!, files: { 'tool.txt': 'tool v2' } },
        ],
      });
      const blocks = runBlocks(DOC, GROUP, { 'running-version': RUNNING });
      const bridge = await makeBridge(t);

      /** Boots a node with the site's directory, runs `blocks`, and reads the status block until it settles. */
      const dayOne = async (name: string, address: number, steps: RunBlock[]) => {
        const hostBlocks = join(dir, `${name}-blocks`);
        mkdirSync(hostBlocks);
        const stick = makeStick(dir, `${name}-stick`, [bundleFile, `${bundleFile}.sha256`]);
        const node = await bootNode(t, {
          root: root.dir,
          bridge,
          address: bridge.nodeAddress(address),
          hostname: name,
          readOnlyBinds: [`${hostBlocks}:${BLOCKS_DIR}`],
          prepare: async (merged) => {
            mkdirSync(join(merged, SITE_DIR), { recursive: true });
            // the tarball under the name `pnpm package` gave it, which the docs must name
            copyFileSync(agent.tarball, join(merged, SITE_DIR, basename(agent.tarball)));
            copyFileSync(keys.pub, join(merged, SITE_DIR, 'factory.pub'));
          },
        });
        const diag = async () =>
          `--- bundle-agent ---\n${(await node.journal('bundle-agent.service')).slice(-4000)}\n--- containerd ---\n${(await node.journal('containerd.service')).slice(-1500)}`;
        t.equal(
          (await node.systemctl('is-active', 'containerd.service')).stdout.trim(),
          'active',
          `${name}: Debian's containerd runs, enabled by its package`,
        );
        t.match(
          await node.must(['containerd', 'config', 'dump']),
          /^\s*config_path = ""$/m,
          `${name}: with its stock config: config_path ""`,
        );
        await runAsWritten(t, node, hostBlocks, steps, () => node.plugStick(stick));
        const status = await readStatusUntilSettled(node, steps.length - 1, diag);
        return { node, status, diag };
      };

      const ok = await dayOne('docs-a', 0, blocks);
      t.equal(ok.status.code, 0, 'bundle-agent status exits 0');
      t.match(
        ok.status.stdout,
        DONE,
        `the status block ends "Done … You may remove the USB stick": ${ok.status.stdout.trim()}`,
      );
      if (ok.status.failed) t.comment(await ok.diag());
      const images = await ok.node.must(['ctr', '-n', 'k8s.io', 'images', 'ls']);
      for (const ref of IMAGES)
        t.match(
          images,
          new RegExp(`^${ref.replace(/[.]/g, '\\.')} .*io\\.cri-containerd\\.pinned=pinned`, 'm'),
          `${ref} is in containerd, pinned`,
        );
      t.match(
        await ok.node.must(['containerd', 'config', 'dump']),
        /^\s*config_path = "\/etc\/containerd\/certs\.d"$/m,
        "the docs' containerd step set config_path",
      );
      t.comment(`the docs' blocks to Done: ${((Date.now() - began) / 1000).toFixed(1)} s so far`);
      await ok.node.stop(); // the second node need not share the two cores with it

      // the same commands without the containerd step
      const skipped = blocks.map((b) => ({
        ...b,
        code: b.code.replace(SKIPPED_CONTAINERD_STEP, ''),
      }));
      t.equal(
        skipped.filter((b, i) => b.code !== blocks[i]!.code).length,
        1,
        `one block had "${SKIPPED_CONTAINERD_STEP.trim()}", now taken out`,
      );
      const refused = await dayOne('docs-b', 1, skipped);
      const s = JSON.parse(await refused.node.must(['cat', '/var/lib/bundle-agent/status.json']));
      const failed = s.conditions?.find(
        (c: { type: string; status: string }) => c.type === 'Failed' && c.status === 'True',
      );
      t.equal(
        failed?.reason,
        'RuntimeIgnoresMirror',
        'without the containerd step the load is refused: RuntimeIgnoresMirror',
      );
      t.match(
        refused.status.stdout,
        /nothing was copied/,
        `the technician reads why: ${refused.status.stdout.trim()}`,
      );
      const journal = await refused.node.journal('bundle-agent.service');
      const line = journal
        .split('\n')
        .find((l) => l.includes('reason=RuntimeIgnoresMirror') && l.includes('config_path is ""'));
      t.match(
        line,
        /--configure-containerd/,
        `one journal line names config_path and the fix: ${line}`,
      );
      if (!line) t.comment(journal.slice(-3000));
      t.equal(
        (
          await refused.node.run([
            'find',
            '/var/lib/upgrade',
            '/etc/containerd/certs.d',
            '-mindepth',
            '1',
          ])
        ).stdout.trim(),
        '',
        'before any copy: nothing staged, no hosts.toml written',
      );
      t.notMatch(journal, /Copying/, 'the technician never saw "Copying"');
      t.comment(`whole test ${((Date.now() - began) / 1000).toFixed(1)} s`);
    },
  );
}
