// `bundle cluster dashboard` in a real browser: Debian's headless Chromium driven by
// playwright-core (no browser download), the real CLI, against the RBAC-enforcing API
// stand-in (no API server can run here) with a bound, non-cluster-admin user. It loads the
// page and reads the rows; changes a node's status in the stand-in and sees the row change
// without a reload; cuts the stand-in and sees the banner and every row marked stale (never
// live); stops the dashboard and sees the page say it lost the server. Screenshots at 1280 and
// 390 px go to a temp dir (the README's images come from scripts/screenshots.mjs, a real run).
import t from 'tap';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { ART_REPO, clusterFixture, clusterVersion, node, nodeStatus } from './lib.js';
import { haveChromium, openDashboard } from './dashboard-page.js';
import { until } from '../helpers/until.js';

if (haveChromium(t)) await browserTests();

async function browserTests(): Promise<void> {
  const started = Date.now();
  const { work, api, kubeconfig, b } = await clusterFixture(t);
  const fixtureMs = Date.now() - started;
  const ago = (s: number) => new Date(Date.now() - s * 1000).toISOString();
  const HOSTILE = '<img src=x onerror="window.pwned=1">disk <b>full</b>';

  function seed(): void {
    api.nodes = ['master-0', 'worker-0', 'worker-1', 'worker-2', 'worker-3'].map((n) => node(n));
    api.nodes = api.nodes.map((n) =>
      n.metadata.name === 'worker-3'
        ? { ...n, status: { conditions: [{ type: 'Ready', status: 'False' }] } }
        : n,
    );
    const s = (name: string, phase: string, extra: Record<string, unknown>, reason?: string) => {
      const doc = nodeStatus(name, phase, b.fileDigest, b.version, reason ? { reason } : {});
      Object.assign(
        doc.status,
        { bundle: { ...doc.status.bundle, media: 'OB-4151', mode: 'staged' } },
        extra,
      );
      return doc;
    };
    // a runtime whose published lists were cut at their bound: what it holds is not known
    const cutHoldings = {
      observedAt: ago(40),
      images: 900,
      pinned: 0,
      references: 900,
      digest: 'sha256:' + '0'.repeat(64),
      pinsReported: true,
      bundle: { refs: 2, missing: [], unpinned: [], truncated: true },
      held: { pinned: [], unpinned: [], truncated: true },
    };
    const history = [
      { version: '4.15.0', state: 'running', at: ago(86400 * 30) },
      { version: '4.15.1', state: 'installing', at: ago(600) },
    ];
    api.statuses = [
      s('master-0', 'Ready', {
        updatedAt: ago(4),
        message: 'Done: 4.15.1 is loaded. You can remove the USB stick.',
        history: [history[0], { ...history[1], state: 'loaded' }],
      }),
      s('worker-0', 'Staging', {
        updatedAt: ago(2),
        message: 'Copying the bundle from the stick: do not remove it.',
        history,
        progress: {
          bytesDone: 7_400_000_000,
          bytesTotal: 18_400_000_000,
          imagesDone: 0,
          imagesTotal: 212,
          rate: 48_000_000,
          etaSeconds: 230,
        },
      }),
      s(
        'worker-1',
        'Failed',
        {
          updatedAt: ago(40),
          message: HOSTILE,
          history: [history[0], { ...history[1], state: 'failed' }],
          runtime: cutHoldings,
        },
        'InsufficientSpace',
      ),
      s('worker-3', 'Preloading', {
        updatedAt: ago(300),
        message: 'Loading images into the container runtime.',
        history,
        progress: {
          bytesDone: 0,
          bytesTotal: 0,
          imagesDone: 64,
          imagesTotal: 212,
          rate: 41_900_000,
          etaSeconds: 1,
        },
      }),
    ];
    api.clusterVersion = clusterVersion('4.15.0');
    api.pods = [
      {
        metadata: {
          namespace: 'openshift-marketplace',
          name: 'catalog-abc',
          ownerReferences: [{ kind: 'Deployment', name: 'catalog', controller: true }],
        },
        spec: {
          containers: [
            { name: 'c', image: `${ART_REPO}@${b.payloadDigest}`, imagePullPolicy: 'Always' },
          ],
        },
      },
    ];
    api.machineAutoscalers = undefined;
    api.clusterAutoscalers = undefined;
    api.clearConfigMaps();
  }

  seed();
  // the dashboard and the browser start side by side; each one's time is reported
  const { dash, page, dashMs, browserMs } = await openDashboard(t, b.file, b.pub, kubeconfig);
  t.comment(
    `set-up: stand-in and bundle ${fixtureMs} ms, dashboard serving ${dashMs} ms, Chromium ${browserMs} ms (side by side)`,
  );
  const shots = work;
  const row = (n: string) =>
    page.locator('#rows tr', { has: page.locator('th', { hasText: new RegExp(`^${n}$`) }) });

  t.test("the page shows one row per Node, the target and prepare's warnings", async (t) => {
    await page.goto(dash.url);
    await page.locator('#rows tr').nth(4).waitFor();
    t.same(
      await page.locator('#rows th').allTextContents(),
      ['master-0', 'worker-0', 'worker-1', 'worker-2', 'worker-3'],
      'worker-2 never reported and shows all the same',
    );
    t.same(await page.locator('thead th').allTextContents(), [
      'Node',
      'Phase',
      'Progress',
      'Source',
      'Pinned',
      'Holds',
      'Heartbeat',
      'Node Ready',
      'Message',
      'History',
    ]);
    t.match(
      await row('worker-0').textContent(),
      /Staging.*40%.*7\.4 GB of 18\.4 GB.*48\.0 MB\/s.*about 4 min left.*copied from stick OB-4151/,
    );
    const bar = row('worker-0').locator('progress');
    t.equal(await bar.getAttribute('aria-label'), 'Progress of worker-0');
    t.equal(await bar.evaluate((e: any) => e.value), 40);
    t.match(await row('worker-2').textContent(), /NotReported.*never/);
    t.match(
      await row('worker-3').locator('td[data-label="Node Ready"]').textContent(),
      'Not Ready',
    );
    t.equal(
      await row('worker-3').locator('td[data-label="Holds"]').textContent(),
      'not known',
      'an agent publishing nothing of its runtime: not known, never "holds it"',
    );
    t.match(await row('worker-3').textContent(), /64 of 212 images/);
    t.notMatch(
      await row('worker-3').textContent(),
      /41\.9 MB\/s|left/,
      'a report 5 min old shows no rate or time left',
    );
    t.match(
      await row('worker-3').locator('td[data-label="Heartbeat"]').textContent(),
      /^5 min ago \(stale\)$/,
    );
    t.match(await row('worker-1').textContent(), /Failed.*InsufficientSpace/);
    const cutCell = row('worker-1').locator('td[data-label="Holds"]');
    t.match(
      await cutCell.textContent(),
      /^0 of \d+, 0 pinned, \d+ not known \(its list was cut\)$/,
      'a cut list: not known, as the terminal says',
    );
    t.match(
      await cutCell.locator('.cell').getAttribute('class'),
      /\bno\b/,
      'in the warning colour',
    );
    t.equal(
      await row('worker-1').locator('td[data-label="Message"]').textContent(),
      HOSTILE,
      "the API's string shown as text",
    );
    t.equal(await page.locator('#rows img, #rows b').count(), 0, 'no element made from it');
    t.equal(await page.evaluate(() => (globalThis as any).pwned), undefined, 'and no script run');
    t.equal(
      await page.locator('#path-box').isVisible(),
      false,
      'a bundle of one release: no update path shown',
    );
    t.equal(await page.locator('#target-version').textContent(), '4.15.1');
    t.equal(await page.locator('#target-running').textContent(), '4.15.0');
    t.equal(await page.locator('#target-summary').textContent(), '1 of 5 Ready for it');
    t.equal(await page.locator('#target-digest').textContent(), b.fileDigest);
    const warnings = (await page.locator('#warnings li').allTextContents()).join('\n');
    t.match(warnings, /NodesNotReady.*1 of 5 nodes Ready/);
    t.match(warnings, /NodeNotReady\s*Node\/worker-3/);
    t.match(warnings, /PullAlways\s*openshift-marketplace\/Deployment\/catalog/);
    t.match(warnings, /MissingSignatures.*bundle cluster prepare/);
    t.equal(await page.locator('#api-lost').isVisible(), false);
    t.same(
      await page.locator('#rows tr.stale th').allTextContents(),
      ['worker-3'],
      'live but for the row whose agent went quiet',
    );
    t.equal(await row('worker-3').locator('.stale-tag').textContent(), 'stale');
  });

  t.test('keyboard: the history opens from the keyboard', async (t) => {
    await page.locator('body').focus();
    let tag = '';
    for (let i = 0; i < 30 && tag !== 'SUMMARY'; i++) {
      await page.keyboard.press('Tab');
      tag = await page.evaluate(() => document.activeElement?.tagName ?? '');
    }
    t.equal(tag, 'SUMMARY', 'a history summary takes the focus');
    await page.keyboard.press('Enter');
    t.match(
      await page.locator('details[open] ol.timeline').first().textContent(),
      /running 4\.15\.0.*(loaded|installing) 4\.15\.1/,
    );
  });

  t.test('screenshots at 1280 and 390 px; no sideways scrolling on the phone', async (t) => {
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.screenshot({ path: path.join(shots, 'dashboard-1280.png'), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    t.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'fits 390 px');
    t.equal(await row('worker-0').locator('td[data-label="Progress"]').isVisible(), true);
    await page.screenshot({ path: path.join(shots, 'dashboard-390.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
    for (const f of ['dashboard-1280.png', 'dashboard-390.png'])
      t.ok(existsSync(path.join(shots, f)), f);
  });

  t.test('a status change in the API shows without a reload', async (t) => {
    await page.evaluate(() => {
      (globalThis as any).sameDocument = true;
    });
    const s = api.get('nodebundlestatuses', 'worker-0')!;
    api.put('nodebundlestatuses', {
      ...s,
      status: {
        ...s.status,
        phase: 'Ready',
        updatedAt: new Date().toISOString(),
        message: 'Done: loaded.',
        conditions: nodeStatus('worker-0', 'Ready', b.fileDigest, b.version).status.conditions,
      },
    });
    await row('worker-0').locator('.phase', { hasText: 'Ready' }).waitFor({ timeout: 10_000 });
    t.match(await row('worker-0').textContent(), /Ready.*100%.*Done: loaded\./);
    t.equal(
      await page.evaluate(() => (globalThis as any).sameDocument),
      true,
      'the same document: no reload',
    );
    t.match(await page.locator('#target-summary').textContent(), /2 of 5 Ready for it/);
  });

  t.test(
    'the API cut: a banner since when, every row marked last known; back when it answers',
    async (t) => {
      await api.pause();
      await page.locator('#api-lost').waitFor({ state: 'visible', timeout: 15_000 });
      t.match(
        await page.locator('#api-lost').textContent(),
        /^Lost contact with the API since \d\d:\d\d:\d\d; rows show the last known state/,
      );
      t.equal(await page.locator('#rows tr.stale').count(), 5, 'every row stale');
      t.equal(await page.locator('#rows tr:not(.stale)').count(), 0, 'none shown as live');
      t.equal(
        await row('worker-1').locator('.stale-tag').isVisible(),
        true,
        'each says "last known"',
      );
      t.match(
        await page.locator('#api-lost .detail').textContent(),
        /ECONNREFUSED|cannot list nodes/,
        'and why',
      );
      await page.screenshot({ path: path.join(shots, 'dashboard-1280-lost.png'), fullPage: true });
      t.match(
        await until(
          'the terminal line',
          () =>
            /dashboard: lost contact with the API since \S+: the page shows the last known state/.exec(
              dash.stderr(),
            )?.[0],
          { timeoutMs: 10_000 },
        ),
        'lost contact',
        'the terminal says so too',
      );
      await api.resume();
      await page.locator('#api-lost').waitFor({ state: 'hidden', timeout: 15_000 });
      t.ok(
        await until(
          'the terminal line',
          () => dash.stderr().includes('dashboard: the API answers again at'),
          { timeoutMs: 10_000 },
        ),
        'and when it answers again',
      );
      t.same(
        await page.locator('#rows tr.stale th').allTextContents(),
        ['worker-3'],
        'live again, but for the quiet agent',
      );
    },
  );

  t.test(
    'the dashboard stopped: the page says it lost the server (EventSource error), rows stale',
    async (t) => {
      dash.child.kill('SIGTERM');
      await new Promise((r) => dash.child.once('exit', r));
      t.equal(dash.child.exitCode, 0, 'Ctrl-C/SIGTERM stops it cleanly');
      await page.locator('#stream-lost').waitFor({ state: 'visible', timeout: 10_000 });
      t.match(
        await page.locator('#stream-lost').textContent(),
        /^Lost the dashboard server since \d\d:\d\d:\d\d; rows show the last known state/,
      );
      t.equal(await page.locator('#rows tr.stale').count(), 5);
    },
  );
}
