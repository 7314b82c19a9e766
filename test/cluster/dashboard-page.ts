// The set-up the dashboard's page tests share: the real CLI serving `bundle cluster dashboard`
// on any free port, and Debian's headless Chromium driven by playwright-core (no browser
// download) with a fresh profile and nothing that reaches the internet, started side by side.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { BUNDLE_BIN, hermeticEnv } from '../builder/lib.js';

const CHROMIUM = '/usr/bin/chromium';

interface Tap {
  fail(message: string): void;
  plan(n: number, comment?: string): void;
  teardown(fn: () => unknown): void;
}

/**
 * Whether the browser tests can run: a missing Chromium skips them (plan 0, saying why), but
 * under CI=true (scripts/setup.sh installs it) a missing browser is a broken set-up, a failure.
 */
export function haveChromium(t: Tap): boolean {
  if (existsSync(CHROMIUM)) return true;
  const why = `${CHROMIUM} is missing: install Debian's chromium (scripts/setup.sh does) to run the dashboard's browser test`;
  if (process.env.CI === 'true') t.fail(`${why} (CI=true: not skipped)`);
  else t.plan(0, why);
  return false;
}

export interface Dashboard {
  child: ChildProcess;
  url: string;
  stderr: () => string;
}

/** The real CLI for `file`, serving on any free port; resolves with its URL once it prints it. */
export function startDashboard(file: string, pub: string, kubeconfig: string): Promise<Dashboard> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        BUNDLE_BIN,
        'cluster',
        'dashboard',
        path.basename(file),
        '--key',
        pub,
        '--kubeconfig',
        kubeconfig,
        '--port',
        '0',
        '--interval',
        '1',
        '--request-timeout',
        '3',
        '--json',
      ],
      { cwd: path.dirname(file), env: hermeticEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout!.on('data', (c) => {
      out += c;
      const line = out.split('\n')[0]!;
      if (out.includes('\n')) resolve({ child, url: JSON.parse(line).url, stderr: () => err });
    });
    child.stderr!.on('data', (c) => {
      err += c;
    });
    child.on('exit', (code) => reject(new Error(`dashboard exited ${code}: ${err}`)));
  });
}

/** The dashboard for `file` and a browser page, started side by side; each stopped at teardown, with how long each took to start. */
export async function openDashboard(
  t: Tap,
  file: string,
  pub: string,
  kubeconfig: string,
): Promise<{
  dash: Dashboard;
  context: BrowserContext;
  page: Page;
  dashMs: number;
  browserMs: number;
}> {
  const { chromium } = await import('playwright-core');
  const profile = await mkdtemp(path.join(os.tmpdir(), 'ob-dash-chromium-'));
  t.teardown(() => rm(profile, { recursive: true, force: true }));
  const timed = async <T>(p: Promise<T>): Promise<[T, number]> => {
    const at = Date.now();
    return [await p, Date.now() - at];
  };
  const [d, c] = await Promise.allSettled([
    timed(startDashboard(file, pub, kubeconfig)),
    // a fresh --user-data-dir (launchPersistentContext's) and nothing that reaches the internet
    timed(
      chromium.launchPersistentContext(profile, {
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
      }),
    ),
  ]);
  // whichever started is stopped at the end, even when the other did not
  if (d.status === 'fulfilled')
    t.teardown(() => {
      if (d.value[0].child.exitCode === null) d.value[0].child.kill('SIGTERM');
    });
  if (c.status === 'fulfilled') t.teardown(() => c.value[0].close());
  if (d.status === 'rejected') throw d.reason;
  if (c.status === 'rejected') throw c.reason;
  const [dash, dashMs] = d.value;
  const [context, browserMs] = c.value;
  const page = context.pages()[0] ?? (await context.newPage());
  return { dash, context, page, dashMs, browserMs };
}
