/**
 * `bundle cluster dashboard`: the rollout as a live page on the admin's machine, read-only.
 * Thin: flags → the feed (polls the API with the admin's kubeconfig), the server (127.0.0.1
 * only), the page (files served by the tool). Registered by cluster.ts, which hands over its
 * bundle loading and options so both read a bundle and a kubeconfig the same way.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { AdminBundle } from '@offline-bundle/cluster';
import { adminApis, ClusterError, type AdminApis } from '@offline-bundle/kube';
import { escapeControls } from '@offline-bundle/host';
import { secondsArg } from '../args.js';
import { loadAssets } from './assets.js';
import { DashboardFeed, MAX_INTERVAL_MS, MIN_INTERVAL_MS } from './feed.js';
import { MAX_SSE_CLIENTS, startDashboardServer } from './server.js';

/** The dashboard's default port (any free one with --port 0). */
const DEFAULT_PORT = 8477;
/** One API read of the dashboard: shorter than the CLI's, so a lost API shows within seconds. */
const DASHBOARD_REQUEST_TIMEOUT_S = 10;

interface DashboardDeps {
  defaultKubeconfig: () => string;
  loadBundle: (file: string, o: TrustOpts, withFileDigest: boolean) => Promise<AdminBundle>;
  trustOptions: (cmd: Command) => Command;
}
interface TrustOpts {
  key?: string[];
  digest?: string;
  releaseKeyring?: string;
}
interface DashboardOpts extends TrustOpts {
  port: number;
  kubeconfig?: string;
  context?: string;
  selector?: string;
  interval: number;
  requestTimeout?: number;
  json?: boolean;
}

const portArg = (v: string): number => {
  const n = Number(v);
  if (!/^[0-9]+$/.test(v) || n > 65535)
    throw new InvalidArgumentError('must be a TCP port, 0 (any free port) to 65535');
  return n;
};
const intervalArg = (v: string): number => {
  const n = secondsArg(v) * 1000;
  if (n < MIN_INTERVAL_MS || n > MAX_INTERVAL_MS)
    throw new InvalidArgumentError(
      `must be ${MIN_INTERVAL_MS / 1000} to ${MAX_INTERVAL_MS / 1000} seconds`,
    );
  return n;
};

async function dashboardApis(o: DashboardOpts, deps: DashboardDeps): Promise<AdminApis> {
  const file = o.kubeconfig ?? deps.defaultKubeconfig();
  try {
    // no whole-command deadline: the dashboard runs until stopped; each read has its own
    return await adminApis(file, o.context, {
      deadlineMs: (o.requestTimeout ?? DASHBOARD_REQUEST_TIMEOUT_S) * 1000,
    });
  } catch (cause) {
    throw new ClusterError(
      'KUBECONFIG',
      `cannot use kubeconfig ${file}${o.context ? ` (context ${o.context})` : ''}: ${(cause as Error).message}: pass --kubeconfig FILE`,
      { cause },
    );
  }
}

/** Serves until SIGINT/SIGTERM/SIGHUP. */
async function serve(
  file: string | undefined,
  o: DashboardOpts,
  deps: DashboardDeps,
): Promise<void> {
  const assets = await loadAssets();
  const bundle = file ? { file, b: await deps.loadBundle(file, o, true) } : undefined;
  const feed = new DashboardFeed({
    apis: await dashboardApis(o, deps),
    intervalMs: o.interval,
    ...(o.selector ? { selector: o.selector } : {}),
    ...(bundle ? { bundle } : {}),
  });
  const server = await startDashboardServer({ port: o.port, assets, feed }).catch(
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE')
        throw Object.assign(
          new Error(
            `port ${o.port} on 127.0.0.1 is in use (another dashboard?): pass --port N, or --port 0 for any free port`,
          ),
          { code: 'PORT_IN_USE' },
        );
      throw err;
    },
  );
  await feed.start();
  if (o.json)
    process.stdout.write(
      JSON.stringify({ url: server.url, port: server.port, intervalMs: o.interval }) + '\n',
    );
  else
    process.stdout.write(
      `dashboard: ${server.url} (read-only; reads the API every ${o.interval / 1000} s; Ctrl-C stops it)\n${escapeControls(feed.snapshot.api.ok ? feed.snapshot.target.summary : `cannot read the API yet: ${feed.snapshot.api.error}`)}\n`,
    );
  // the terminal that started it says when the page stops being live, and when it is again
  let answering = feed.snapshot.api.ok;
  feed.on('change', (s: typeof feed.snapshot) => {
    if (s.api.ok === answering) return;
    answering = s.api.ok;
    const line = s.api.ok
      ? `the API answers again at ${s.api.lastOk}: the page is live`
      : `lost contact with the API since ${s.api.lostSince}: the page shows the last known state (${s.api.error ?? 'no answer'})`;
    process.stderr.write(`${escapeControls(`dashboard: ${line}`)}\n`);
  });
  await new Promise<void>((resolve) => {
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(s, () => resolve());
  });
  feed.stop();
  await server.close();
}

export function addDashboardCommand(cluster: Command, deps: DashboardDeps): void {
  deps
    .trustOptions(
      cluster
        .command('dashboard')
        .description(
          `A live, read-only page of the rollout on http://127.0.0.1:PORT/ for the admin's browser: one row per Node (phase, progress with rate and time left, source, pinned, heartbeat age, Node Ready, the technician's message, history), the bundle the cluster would upgrade to and the warnings "status" and (given the bundle file) "prepare" give. It reads the API every --interval with the admin's kubeconfig and pushes changes to the page (Server-Sent Events); when the API stops answering, the page says since when and marks every row as last known.`,
        )
        .argument(
          '[bundle]',
          "the bundle file to upgrade with: rows are Ready for its digest, and prepare's checks (pull policies, release signatures, version graph, autoscalers) run every 30 s without applying anything",
        )
        .addOption(
          new Option('--port <n>', 'port on 127.0.0.1 (0: any free port)')
            .argParser(portArg)
            .default(DEFAULT_PORT),
        )
        .option(
          '--kubeconfig <file>',
          'kubeconfig of an admin user (default: $KUBECONFIG or ~/.kube/config); through "oc port-forward", one naming its local port',
        )
        .option('--context <name>', 'kubeconfig context (default: the current one)')
        .option('-l, --selector <labels>', 'only nodes with these labels')
        .addOption(
          new Option(
            '--interval <seconds>',
            `how often the API is read (${MIN_INTERVAL_MS / 1000} to ${MAX_INTERVAL_MS / 1000})`,
          )
            .argParser(intervalArg)
            .default(2000, '2'),
        )
        .option(
          '--request-timeout <seconds>',
          `the most one API read may take before the page says it lost the API (default: ${DASHBOARD_REQUEST_TIMEOUT_S})`,
          secondsArg,
        )
        .option('--json', 'print {"url", "port", "intervalMs"} as one JSON line once serving'),
    )
    .addHelpText(
      'after',
      `
Open the printed address in a browser on this machine. Only 127.0.0.1 is listened on, requests
naming another Host are refused, and at most ${MAX_SSE_CLIENTS} pages may be open at once. The page
changes nothing: approving a bundle and starting the upgrade stay with "bundle cluster upgrade".
Example:
  bundle cluster dashboard 4.15.1.bundle --key factory.pub --kubeconfig admin.kubeconfig
  ssh -L 8477:127.0.0.1:8477 admin-host   # from another machine: a tunnel, never --host`,
    )
    .action(async (file: string | undefined, o: DashboardOpts) => serve(file, o, deps));
}
