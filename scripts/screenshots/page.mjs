// scripts/screenshots.mjs, the admin's side: the real `bundle cluster dashboard` with an admin
// bound as deploy/admin-rbac.yaml says, read in Debian's headless Chromium through playwright-core
// (nothing downloaded), as test/cluster/dashboard-browser.test.ts drives it.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { BUNDLE_BIN } from './factory.mjs';

const CHROMIUM = '/usr/bin/chromium';

/** The dashboard on a free port; resolves with its URL once it prints it (--json). */
function startDashboard(ctx, kubeconfig) {
  return new Promise((resolve, reject) => {
    const args = [
      'cluster',
      'dashboard',
      path.basename(ctx.rel.file),
      '--key',
      ctx.rel.pub,
      '--kubeconfig',
      kubeconfig,
      '--port',
      '0',
      '--interval',
      '1',
      '--json',
    ];
    const child = spawn(process.execPath, [BUNDLE_BIN, ...args], {
      cwd: path.dirname(ctx.rel.file),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    ctx.cleanups.push(() => {
      if (child.exitCode === null) child.kill('SIGTERM');
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => {
      out += c;
      if (out.includes('\n')) resolve({ child, url: JSON.parse(out.split('\n')[0]).url });
    });
    child.stderr.on('data', (c) => {
      err += c;
    });
    child.on('exit', (code) => reject(new Error(`the dashboard exited ${code}: ${err}`)));
  });
}

/** The dashboard, and the page open on it with its rows read once. */
export async function openDashboard(h, ctx) {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (scripts/setup.sh does)`);
  const kubeconfig = await ctx.api.tokenKubeconfig(
    path.join(ctx.tmp, 'admin.kubeconfig'),
    h.bindAdmin(ctx.api, h.ADMIN),
  );
  const dash = await startDashboard(ctx, kubeconfig);
  const { chromium } = await import('playwright-core');
  const context = await chromium.launchPersistentContext(path.join(ctx.tmp, 'chromium'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  ctx.cleanups.push(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(dash.url);
  await page.locator('#rows tr').nth(4).waitFor({ timeout: 30_000 });
  const row = (n) =>
    page.locator('#rows tr', { has: page.locator('th', { hasText: new RegExp(`^${n}$`) }) });
  return { page, row, dash };
}

/** What each row shows: node, phase, reason, the message, and whether it is marked stale. */
export async function pageRows(page) {
  return page.locator('#rows tr').evaluateAll((trs) =>
    trs.map((tr) => {
      const cell = (label) => tr.querySelector(`td[data-label="${label}"]`)?.textContent ?? '';
      return {
        node: tr.querySelector('th')?.textContent ?? '',
        phase: tr.querySelector('.phase')?.textContent ?? '',
        reason: tr.querySelector('.reason')?.textContent ?? '',
        message: cell('Message'),
        stale: tr.classList.contains('stale'),
      };
    }),
  );
}
