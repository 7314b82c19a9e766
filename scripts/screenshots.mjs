#!/usr/bin/env node
// The README's pictures of `bundle cluster dashboard`, made from a real run (#40 item 4), so
// what they show is what the tools say and nothing a test wrote:
//   factory: a registry with an OpenShift-shaped 4.15.1 release, `bundle create` with a release
//   signature (as scripts/demo.mjs does);
//   cluster: the Kubernetes API stand-in (test/helpers/kube-standin.ts, RBAC and the CRD's rules
//   enforced), its Nodes, ClusterVersion 4.15.0 and one Pod pulling with imagePullPolicy Always
//   (the cluster's own objects: there is no cluster here, so these are seeded);
//   nodes: per node a loop-mounted ext4 "USB stick" labelled OCP-4.15.1, a private containerd and
//   `bundle-agent run` reporting NodeBundleStatus with the node's own kubeconfig. Every row's
//   phase, progress and message is what that agent wrote:
//     master-0  loads the bundle: Ready;
//     worker-0  caught mid-Preloading (its containerd, then the agent, are stopped with SIGSTOP
//               once the cluster shows images done: the moment held, not made up);
//     worker-1  its stick holds a copy with one byte changed: the agent refuses it (Failed);
//     worker-2  the agent stopped (SIGSTOP) while it copied, and its Node goes NotReady: after
//               three missed heartbeats (3 min) its row is stale;
//     worker-3  a Node whose agent never reported.
//   admin: the real `bundle cluster dashboard FILE --key` in Debian's headless Chromium
//   (playwright-core, as test/cluster/dashboard-browser.test.ts), at 1280 and 390 px, then with
//   the API stand-in cut.
// Writes docs/img/dashboard-1280.png, dashboard-390.png, dashboard-1280-lost.png and
// docs/img/screenshots.json (each picture's sha256 and the node messages it shows), which
// test/status/screenshots.test.ts checks. Run `pnpm screenshots` as root (mount, containerd);
// it takes about five minutes, most of it the wait for worker-2 to go stale.
// SCREENSHOTS_DIR=DIR writes elsewhere (a dry run). The test helpers are TypeScript: they load
// through the ts-node that node-tap uses, with test/tsconfig.json.
import { createHash } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { makeRelease } from './screenshots/factory.mjs';
import { startNode, freezeWhen, freezeMidPreload } from './screenshots/nodes.mjs';
import { openDashboard, pageRows } from './screenshots/page.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OUT = path.resolve(process.env.SCREENSHOTS_DIR ?? path.join(ROOT, 'docs', 'img'));
const say = (s) => process.stdout.write(`screenshots: ${s}\n`);
/** Three heartbeats of 60 s (STALE_AFTER_BEATS, DEFAULT_HEARTBEAT_MS) and a margin. */
const STALE_AFTER_MS = 3 * 60_000 + 5_000;

/** The TypeScript test helpers, through node-tap's own ts-node (transpile only). */
async function testHelpers() {
  process.env.TS_NODE_PROJECT = path.join(ROOT, 'test', 'tsconfig.json');
  process.env.TS_NODE_TRANSPILE_ONLY ??= 'true';
  const tap = createRequire(realpathSync(path.join(ROOT, 'node_modules', 'tap', 'package.json')));
  const tapTs = createRequire(tap.resolve('@tapjs/typescript/package.json'));
  const tsNode = path.dirname(tapTs.resolve('@isaacs/ts-node-temp-fork-for-pr-2009/package.json'));
  await import(pathToFileURL(path.join(tsNode, 'import.mjs')).href);
  const load = (rel) => import(pathToFileURL(path.join(ROOT, rel)).href);
  const [standin, cluster, signing, until] = await Promise.all([
    load('test/helpers/kube-standin.ts'),
    load('test/cluster/lib.ts'),
    load('test/builder/release-signing.ts'),
    load('test/helpers/until.ts'),
  ]);
  return { startKubeStandIn: standin.startKubeStandIn, ...cluster, ...signing, until: until.until };
}

/** The cluster's own objects: Nodes, the running release, one Pod that pulls with Always. */
function seedCluster(h, api, rel) {
  api.nodes = ['master-0', 'worker-0', 'worker-1', 'worker-2', 'worker-3'].map((n) =>
    h.node(
      n,
      n.startsWith('master')
        ? { 'node-role.kubernetes.io/master': '' }
        : { 'node-role.kubernetes.io/worker': '' },
    ),
  );
  api.clusterVersion = h.clusterVersion('4.15.0');
  api.pods = [
    {
      metadata: {
        namespace: 'openshift-marketplace',
        name: 'catalog-7d9f',
        ownerReferences: [{ kind: 'Deployment', name: 'catalog', controller: true }],
      },
      spec: {
        containers: [
          { name: 'registry-server', image: rel.payload.console, imagePullPolicy: 'Always' },
        ],
      },
    },
  ];
  api.machineAutoscalers = undefined;
  api.clusterAutoscalers = undefined;
}

/** The Node of `name` not Ready, as the node controller marks a node that stopped answering. */
function nodeDown(api, name) {
  api.nodes = api.nodes.map((n) =>
    n.metadata.name === name
      ? { ...n, status: { conditions: [{ type: 'Ready', status: 'Unknown' }] } }
      : n,
  );
}

const sha256 = (b) => createHash('sha256').update(b).digest('hex');

/** Takes one picture; returns its record for screenshots.json. */
async function shoot(page, file, viewport, what) {
  await page.setViewportSize(viewport);
  await page.waitForTimeout(300);
  const png = await page.screenshot({ fullPage: true });
  await writeFile(path.join(OUT, file), png);
  const rows = await pageRows(page);
  const warnings = await page.locator('#warnings li .kind').allTextContents();
  say(`${file}: ${rows.length} rows, warnings ${warnings.join(', ')}`);
  return { file, sha256: sha256(png), viewport, shows: what, rows, warnings };
}

/** Stale, Ready and Failed first (stale needs three minutes), Preloading last, just before the pictures. */
async function runNodes(h, ctx) {
  const stale = await startNode(ctx, 'worker-2');
  await freezeWhen(
    ctx,
    stale,
    (s) => s.phase === 'Staging' || (s.phase === 'Verifying' && s.progress?.bytesDone > 0),
  );
  const frozenAt = Date.now();
  nodeDown(ctx.api, 'worker-2');
  say('worker-2: agent stopped mid-copy; its row goes stale in 3 min');
  const ready = await startNode(ctx, 'master-0');
  const failed = await startNode(ctx, 'worker-1', { tamper: true });
  await h.until(
    'master-0 Ready and worker-1 Failed in the cluster',
    () => ctx.phase('master-0') === 'Ready' && ctx.phase('worker-1') === 'Failed',
    { timeoutMs: 240_000, stepMs: 200 },
  );
  say(`master-0 ${ctx.phase('master-0')}, worker-1 ${ctx.phase('worker-1')}`);
  return { stale, ready, failed, frozenAt };
}

async function main() {
  if (process.getuid?.() !== 0)
    throw new Error('run as root: it loop-mounts the "USB sticks" and starts containerd');
  const h = await testHelpers();
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'ob-screenshots-'));
  const cleanups = [() => rm(tmp, { recursive: true, force: true })];
  try {
    say('factory: registry, release 4.15.1, bundle create');
    const rel = await makeRelease(h, tmp, cleanups);
    const api = await h.startKubeStandIn();
    cleanups.push(() => api.close());
    seedCluster(h, api, rel);
    const ctx = {
      h,
      api,
      tmp,
      rel,
      cleanups,
      phase: (n) => api.get('nodebundlestatuses', n)?.status?.phase,
    };
    const nodes = await runNodes(h, ctx);
    const dash = await openDashboard(h, ctx);
    await h.until(
      'worker-2 stale on the page',
      async () =>
        Date.now() - nodes.frozenAt > STALE_AFTER_MS &&
        (await dash.page.locator('#rows tr.stale th', { hasText: 'worker-2' }).count()) > 0,
      { timeoutMs: STALE_AFTER_MS + 120_000, stepMs: 1000 },
    );
    const preloading = await startNode(ctx, 'worker-0');
    await freezeMidPreload(ctx, preloading);
    await h.until(
      'worker-0 Preloading on the page',
      async () => /Preloading/.test(await dash.row('worker-0').textContent()),
      { timeoutMs: 30_000 },
    );
    const shots = [
      await shoot(
        dash.page,
        'dashboard-1280.png',
        { width: 1280, height: 900 },
        'the dashboard at 1280 px',
      ),
      await shoot(
        dash.page,
        'dashboard-390.png',
        { width: 390, height: 844 },
        'the dashboard at 390 px',
      ),
    ];
    await dash.page.setViewportSize({ width: 1280, height: 900 });
    await api.pause();
    await dash.page.locator('#api-lost').waitFor({ state: 'visible', timeout: 30_000 });
    shots.push(
      await shoot(
        dash.page,
        'dashboard-1280-lost.png',
        { width: 1280, height: 900 },
        'the API stand-in cut',
      ),
    );
    await api.resume();
    await writeFile(
      path.join(OUT, 'screenshots.json'),
      `${JSON.stringify({ script: 'scripts/screenshots.mjs', images: shots }, null, 2)}\n`,
    );
    say(`wrote ${shots.map((s) => s.file).join(', ')} and screenshots.json to ${OUT}`);
  } finally {
    for (const c of cleanups.reverse())
      await Promise.resolve()
        .then(c)
        .catch((e) => say(`clean-up: ${e.message}`));
  }
}

await main().then(
  () => process.exit(0),
  (err) => {
    console.error(`screenshots: ${err.stack ?? err}`);
    process.exit(1);
  },
);
