// The agent's config turned into the peer server's and the fetcher's options: one place that
// knows which config key feeds which bound, so the daemon only adds what it learns at run time
// (its address and port, its role, what it holds, the approval it acts on).
import type { Trust } from '@offline-bundle/format';
import { peerSlots, type AgentConfig } from '../config.js';
import { planSpace } from '../load/space.js';
import type { PeerFetchOptions } from './peer-fetch.js';
import type { PeerServerOptions } from './peer-server.js';
import type { PeerOffer } from './served-bundle.js';
import type { PeerCredentials } from './peer-tls.js';

interface PeerServerPlace {
  /** The Node's InternalIP (the address the directory publishes). */
  host: string;
  /** peers.port. */
  port: number;
  /** A control-plane node: peers.controlPlaneDownloaders slots instead of peers.downloaders. */
  controlPlane: boolean;
  bundle: (manifestDigest: string) => PeerOffer | undefined;
}

export function peerServerOptions(
  config: AgentConfig,
  credentials: PeerCredentials,
  place: PeerServerPlace,
): PeerServerOptions {
  return {
    credentials,
    host: place.host,
    port: place.port,
    bundle: place.bundle,
    uploadBytesPerSecond: config.peers.uploadRate,
    downloaders: peerSlots(config, place.controlPlane),
  };
}

/**
 * What a fetch takes from the config: the staging directory and its space check (the load's
 * own), and fsync as a stick staging does it (synced when the layout outlives the load).
 * `trust` is loadTrust(config.trust.keys) as the load reads it.
 */
export function peerFetchBase(
  config: AgentConfig,
  credentials: PeerCredentials,
  trust: Trust,
): Pick<PeerFetchOptions, 'credentials' | 'trust' | 'upgradeDir' | 'planSpace' | 'fsync'> {
  return {
    credentials,
    trust,
    upgradeDir: config.paths.upgradeDir,
    planSpace: (m, credit, words) => planSpace(m, config, credit, words),
    fsync: config.staging.keep !== false,
  };
}
