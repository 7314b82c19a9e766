// The daemon's peers (issue #22), when peers.enabled: the peer server on the Node's InternalIP
// serving what this node keeps, status.serving published, and every few seconds a look at the
// approvals for a bundle to fetch from the other nodes, one thing at a time with the stick's loads.
import type { StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { ApiPeerDirectory } from '../peers/directory.js';
import { peerServerOptions } from '../peers/peer-config.js';
import { startPeerServer, type RunningPeerServer } from '../peers/peer-server.js';
import { PeerService } from '../peers/peer-service.js';
import { loadPeerCredentials } from '../peers/peer-tls.js';
import { runtimeTarget } from '../runtime/runtime-target.js';

/** How often the approvals are looked at, at least. */
const MIN_PEER_POLL_MS = 5000;

export interface DaemonPeers {
  /** Offers what this node keeps again (after a stick's load) and publishes it. */
  refresh(): Promise<void>;
  stop(): Promise<void>;
}

interface PeerDaemon {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  signal: AbortSignal;
  agentVersion: string;
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
}

/** Starts serving and watching the approvals; undefined (said in the log) when this node cannot take part. */
export async function startPeers(d: PeerDaemon): Promise<DaemonPeers | undefined> {
  const { config, log, tracker } = d;
  if (!config.peers.enabled || !config.status.kubeconfig) return undefined;
  let server: RunningPeerServer | undefined;
  try {
    const credentials = await loadPeerCredentials(config.peers);
    const directory = new ApiPeerDirectory({ node: config.nodeName, kubeconfig: config.status.kubeconfig });
    const address = await directory.ownAddress();
    if (!address) throw new Error(`the Node ${config.nodeName} has no InternalIP to serve peers on`);
    const service = new PeerService({
      directory, credentials, address, port: config.peers.port,
      context: { config, log, tracker, agentVersion: d.agentVersion }, runtime: () => runtimeTarget(config, log),
    });
    server = await startPeerServer(peerServerOptions(config, credentials, { host: address, port: config.peers.port, controlPlane: false, bundle: (m) => service.offer(m) }));
    const publish = () => tracker.update((s) => {
      const serving = service.serving();
      if (serving) s.serving = serving;
      else delete s.serving;
    });
    const refresh = async () => {
      await service.offerKept();
      publish();
    };
    await refresh();
    log.info('peers', `serving other nodes on ${server.url}; fetching approved bundles from them`, { url: server.url });
    let task: Promise<void> | undefined;
    const timer = setInterval(() => {
      if (task || d.signal.aborted) return;
      // queued behind a stick's load, it may start after a stop: it then does nothing
      task = d.exclusive(async () => { if (!d.signal.aborted) await service.syncOnce(d.signal); })
        .then(publish, (err: unknown) => log.warn('peers', `cannot look for approved bundles: ${oneLine(err)}`))
        .finally(() => { task = undefined; });
    }, Math.max(MIN_PEER_POLL_MS, config.media.pollSeconds * 1000));
    const running = server;
    const stop = async () => {
      clearInterval(timer);
      await task;
      await running.close();
      // a stopped node is no peer: others would try it first
      tracker.update((s) => { delete s.serving; });
    };
    return { refresh, stop };
  } catch (err) {
    await server?.close().catch(() => undefined);
    log.warn('peers', `not serving or fetching bundles between nodes: ${oneLine(err)}`);
    return undefined;
  }
}
