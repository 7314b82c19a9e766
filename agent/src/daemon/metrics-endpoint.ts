// The daemon's authenticated metrics listener (metrics.enabled): on the Node's InternalIP (or
// metrics.address), with the site's serving certificate or a self-signed one, every request
// reviewed by the API server. The loopback status endpoint is not changed by it. An address the
// API server cannot give yet, or a port taken, is said in the journal and tried again; an
// InternalIP that changes while running moves the listener (and its self-signed certificate).
import {
  certificateIp,
  fileServingTls,
  kubeReviews,
  MetricsAuth,
  readClientCa,
  selfSignedServingTls,
  siteOrSelfSigned,
  startMetricsListener,
  TLS_RELOAD_MS,
  type Metrics,
  type MetricsListener,
  type ServingTls,
} from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { ApiPeerDirectory } from '../peers/directory.js';

/** How long after a failed start the listener is tried again. */
const METRICS_START_RETRY_MS = 60_000;
/** How often the Node's InternalIP is looked up again (when metrics.address is not set). */
const METRICS_ADDRESS_CHECK_MS = TLS_RELOAD_MS;

/** The address to serve on: metrics.address, else the Node's InternalIP (an IPv4-mapped one as IPv4). */
async function nodeAddress(config: AgentConfig): Promise<string> {
  const given =
    config.metrics.address ??
    (
      await new ApiPeerDirectory({
        node: config.nodeName,
        kubeconfig: config.status.kubeconfig!,
      }).ownNode()
    ).address;
  if (!given)
    throw new Error(
      `the Node ${config.nodeName} has no InternalIP to serve metrics on: set metrics.address`,
    );
  return certificateIp(given);
}

function servingTls(
  config: AgentConfig,
  log: Logger,
  host: string,
): Promise<() => Promise<ServingTls>> | (() => Promise<ServingTls>) {
  const m = config.metrics;
  const selfSigned = async () => {
    const own = await selfSignedServingTls(
      config.paths.stateDir,
      [host],
      `bundle-agent metrics ${config.nodeName}`,
      (file) =>
        log.info('metrics', `renewed the self-signed serving certificate: ${file}`, { file }),
    );
    if (own.made)
      log.info(
        'metrics',
        `made a self-signed serving certificate for ${host}: ${own.certFile} (Prometheus needs it as ca_file, or set metrics.cert and metrics.key)`,
        { file: own.certFile },
      );
    return own.load;
  };
  if (!m.cert || !m.key) return selfSigned();
  // a config shared by nodes of several distributions names one's kubelet paths: where they are missing, serve the self-signed one
  return siteOrSelfSigned(fileServingTls(m.cert, m.key), selfSigned, (self, why) => {
    if (self)
      log.warn(
        'metrics',
        `${why}: serving a self-signed certificate instead until it is there (set metrics.cert and metrics.key to this distribution's kubelet serving certificate)`,
      );
    else log.info('metrics', `serving ${m.cert} again: ${why}`);
  });
}

async function setUp(config: AgentConfig, log: Logger, metrics: Metrics): Promise<MetricsListener> {
  const host = await nodeAddress(config);
  const clientCaFile = config.metrics.clientCA;
  const listener = await startMetricsListener({
    metrics,
    auth: new MetricsAuth(kubeReviews(config.status.kubeconfig!, config.nodeName)),
    host,
    port: config.metrics.port,
    tls: await servingTls(config, log, host),
    ...(clientCaFile ? { clientCa: () => readClientCa(clientCaFile) } : {}),
    log: (level, message) => log[level]('metrics', message),
  });
  metrics.trackListener(listener);
  return listener;
}

/** Starts the listener (now, or by retries in the background); returns its stop. */
export function startMetricsEndpoint(
  config: AgentConfig,
  log: Logger,
  metrics: Metrics,
  retryMs = METRICS_START_RETRY_MS,
  addressCheckMs = METRICS_ADDRESS_CHECK_MS,
): () => Promise<void> {
  let listener: MetricsListener | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let busy: Promise<void> = Promise.resolve();
  const attempt = async () => {
    try {
      const l = await setUp(config, log, metrics);
      if (stopped) return void (await l.close());
      listener = l;
      log.info(
        'metrics',
        `metrics for the cluster's Prometheus on ${l.url} (TLS; bearer token or client certificate, reviewed by the API server)`,
        { url: l.url },
      );
    } catch (err) {
      if (stopped) return;
      log.warn(
        'metrics',
        `the metrics listener did not start: ${oneLine(err)}; trying again in ${Math.round(retryMs / 1000)} s`,
      );
      timer = setTimeout(() => void (busy = attempt()), retryMs);
      timer.unref();
    }
  };
  const moved = async () => {
    if (stopped || !listener) return;
    const now = await nodeAddress(config).catch(() => listener!.host);
    if (now === listener.host || stopped) return;
    log.info(
      'metrics',
      `the Node's InternalIP changed from ${listener.host} to ${now}: moving the metrics listener`,
    );
    await listener.close();
    listener = undefined;
    await attempt();
  };
  const watch =
    config.metrics.address === undefined
      ? setInterval(() => void (busy = busy.then(moved)), addressCheckMs)
      : undefined;
  watch?.unref();
  busy = attempt();
  return async () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    if (watch) clearInterval(watch);
    await busy;
    await listener?.close();
  };
}
