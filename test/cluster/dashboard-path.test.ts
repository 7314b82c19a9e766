// The dashboard page shows an update path (#43) release by release, from the data `bundle
// cluster status` reads (readPathStatus: the gate prepare wrote, ClusterVersion, admin-gates):
// a two-hop bundle prepared and started with the real CLI against the API stand-in, the CVO's
// history scripted as the CVO writes it, the page in headless Chromium (dashboard-page.ts).
// In the middle of hop one: 4.15.40 in progress, 4.16.2 next; once hop one Completed with an
// admin gate unacknowledged, the page shows 4.15.40 done and 4.16.2 waiting for that ack, without
// a reload, and each time the same states status --json gives.
import t from 'tap';
import path from 'node:path';
import { signRelease } from '../builder/release-signing.js';
import { RELEASE_REPO, clusterFixture, clusterVersion, makeBundle, nodeStatus } from './lib.js';
import { haveChromium, openDashboard } from './dashboard-page.js';

if (haveChromium(t)) await pathTests();

async function pathTests(): Promise<void> {
  const { work, api, key, kubeconfig, cluster, allReady } = await clusterFixture(t);
  const p = await makeBundle(path.join(work, 'path'), {
    version: '4.16.2',
    upgradeFrom: ['4.15.40'],
    via: [{ version: '4.15.40', upgradeFrom: ['4.14.30'] }],
    sign: async (d, ref) => [await signRelease(key, ref, d)],
  });
  const image1 = `${RELEASE_REPO}@${p.via[0]!.releaseDigest}`;
  const GATE = 'ack-4.15-kube-1.29-api-removals-in-4.16';
  const MCO = 'machineconfiguration.openshift.io';
  const cm = (namespace: string, name: string, data: Record<string, string>) => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { namespace, name },
    data,
  });
  /** What the CVO writes into ClusterVersion's history as it takes `version`. */
  const cvo = (version: string, image: string, state: 'Partial' | 'Completed') => {
    const cv = api.clusterVersion!;
    const history = cv.status.history.filter((h: { version: string }) => h.version !== version);
    api.clusterVersion = {
      ...cv,
      status: { ...cv.status, history: [{ state, version, image }, ...history] },
    };
  };

  allReady();
  api.statuses = api.nodes.map((n) =>
    nodeStatus(n.metadata.name, 'Ready', p.fileDigest, p.version),
  );
  api.clusterVersion = clusterVersion('4.14.30');
  api.replaceAll(
    'machineconfigpools',
    ['master', 'worker'].map((name) => ({
      apiVersion: `${MCO}/v1`,
      kind: 'MachineConfigPool',
      metadata: { name },
      spec: { paused: false, pinnedImageSets: [] },
    })),
  );
  api.replaceAll('pinnedimagesets', []);
  // prepare writes the gate with the path; upgrade asks for hop one; the CVO is under way
  const prepared = await cluster(['prepare', p.file, '--key', p.pub]);
  const started = await cluster(['upgrade', p.file, '--key', p.pub]);
  if (prepared.code !== 0 || started.code !== 0)
    throw new Error(`set-up: prepare ${prepared.stderr} upgrade ${started.stderr}`);
  cvo('4.15.40', image1, 'Partial');

  const { dash, page } = await openDashboard(t, p.file, p.pub, kubeconfig);
  const shown = async () =>
    (await page.locator('#path-releases li').allTextContents()).map((x) =>
      x.replace(/\s+/g, ' ').trim(),
    );
  const statusReleases = async () =>
    (
      JSON.parse((await cluster(['status', '--json'])).stdout).path.releases as {
        version: string;
        state: string;
        acks?: string[];
      }[]
    ).map((r) => `${r.version} ${r.state}${r.acks ? `: ${r.acks.join(', ')}` : ''}`);

  t.test(
    'in the middle of hop one: each release of the path with its state, as status gives it',
    async (t) => {
      await page.goto(dash.url);
      await page.locator('#path-releases li').nth(1).waitFor();
      t.equal(await page.locator('#path-box').isVisible(), true);
      t.equal(
        await page.locator('#path-line').textContent(),
        'path 4.14.30 → 4.15.40 → 4.16.2: hop 1 of 2 (4.14.30 → 4.15.40) under way',
      );
      t.same(await shown(), ['4.15.40 in progress', '4.16.2 next']);
      t.same(
        await shown(),
        await statusReleases(),
        'the same states bundle cluster status --json gives',
      );
    },
  );

  t.test(
    'hop one Completed, an admin gate not acknowledged: done, then waiting for ack, without a reload',
    async (t) => {
      await page.evaluate(() => {
        (globalThis as any).sameDocument = true;
      });
      api.put(
        'configmaps',
        cm('openshift-config-managed', 'admin-gates', {
          [GATE]: 'Kubernetes 1.29 removes several APIs.',
        }),
      );
      api.put('configmaps', cm('openshift-config', 'admin-acks', {}));
      cvo('4.15.40', image1, 'Completed');
      await page
        .locator('#path-releases li', { hasText: 'waiting for ack' })
        .waitFor({ timeout: 15_000 });
      t.same(await shown(), ['4.15.40 done', `4.16.2 waiting for ack: ${GATE}`]);
      t.match(
        await page.locator('#path-line').textContent(),
        /hop 2 of 2 \(4\.15\.40 → 4\.16\.2\) next/,
      );
      t.same(await shown(), await statusReleases(), 'as status gives it');
      t.equal(
        await page.evaluate(() => (globalThis as any).sameDocument),
        true,
        'the same document: no reload',
      );
    },
  );
}
