/** The status of one node's bundle work, as the agent reports it everywhere (file, CLI, cluster). */

export const PHASES = [
  'Idle',
  'Verifying',
  'Staging',
  'Serving',
  'Preloading',
  'Pinning',
  'Ready',
  'Failed',
] as const;
export type Phase = (typeof PHASES)[number];

export const CONDITION_TYPES = [
  'MediaDetected',
  'Verified',
  'SpaceAvailable',
  'Staged',
  'Serving',
  'Preloaded',
  'Pinned',
  'UnpinPending',
  'Ready',
  'Failed',
  'AgentUpgraded',
  'MediaIncomplete',
  'Peers',
] as const;
export type ConditionType = (typeof CONDITION_TYPES)[number];

export const CONDITION_STATUSES = ['True', 'False', 'Unknown'] as const;
export type ConditionStatus = (typeof CONDITION_STATUSES)[number];

export interface Condition {
  type: ConditionType;
  status: ConditionStatus;
  /** CamelCase machine reason, e.g. BadSignature, InsufficientSpace. */
  reason: string;
  message: string;
  lastTransitionTime: string;
  /**
   * metadata.generation of the cluster object this condition was computed against. The agent
   * leaves it unset; the cluster reporter fills it in from the object it created.
   */
  observedGeneration?: number;
}

export interface Progress {
  bytesDone: number;
  bytesTotal: number;
  imagesDone: number;
  imagesTotal: number;
  /** Bytes per second over the current step. */
  rate?: number;
  etaSeconds?: number;
}

export const BUNDLE_MODES = ['staged', 'media'] as const;
export type BundleMode = (typeof BUNDLE_MODES)[number];

export interface BundleIdentity {
  file: string;
  name?: string;
  version?: string;
  arch?: string;
  digest?: string;
  signer?: string;
  /** Where it came from: the media's label or mount point, or "file". */
  media?: string;
  /** staged: copied to disk; media: served from the stick, which must stay in. */
  mode?: BundleMode;
  /** The other nodes it was fetched from (names), when it came from peers rather than a stick. */
  fromPeers?: string[];
  /**
   * The versions of the update path the bundle carries (#43), in the order the cluster takes
   * them, `version` (the final one) last; absent for a bundle of one release.
   */
  path?: string[];
}

/**
 * What this node offers other nodes of one bundle (peer discovery, issue #22): others find it in
 * the NodeBundleStatus and fetch from https://ADDRESS:PORT with mutual TLS. The address is the
 * Node's InternalIP; a fetching node ignores any other.
 */
export interface ServingStatus {
  /** sha256:… of the bundle's signed bundle.json. */
  manifestDigest: string;
  /** Every blob of the bundle is held, verified. */
  complete: boolean;
  /** Blobs held verified (a node serves each blob once it verified it). */
  verifiedBlobs: number;
  /** The Node's InternalIP (IPv4 or IPv6, no brackets). */
  address: string;
  /** The peer port (9000–9999). */
  port: number;
}

/**
 * What this node's transfers between nodes did since the agent started (issue #22), in the
 * compact form the status carries; the agent's /metrics renders the same counters.
 */
export interface PeerTransferStatus {
  /** Bytes of bundles this node's peer server sent to other nodes. */
  bytesServed: number;
  /** Verified bytes this node fetched from other nodes (a blob that failed its digest not counted). */
  bytesFetched: number;
  /** bytesFetched by the node it came from. */
  fetchedFrom: { node: string; bytes: number }[];
  /** Peers caught serving bytes that did not match the signed bundle.json. */
  suspect: string[];
}

/**
 * How many other nodes hold a complete copy of the bundle this node loaded: what tells the
 * technician at the stick node whether the stick may go.
 */
export interface PeerCopies {
  /** The release version the count is for (the loaded bundle's). */
  version: string;
  /** Other nodes publishing a complete copy of it (status.serving, through the same checks a fetch makes). */
  nodes: number;
  /** This node offers it whole to the other nodes (a kept layout). */
  serving: boolean;
}

/** This node's part in bundles between nodes (issue #22): present while peers.enabled. */
export interface PeersStatus {
  /** The peer server runs; false while it cannot start (problem says why; the agent tries again). */
  up: boolean;
  problem?: { reason: string; message: string };
  transfer: PeerTransferStatus;
  copies?: PeerCopies;
}

export const HISTORY_STATES = ['installing', 'loaded', 'running', 'complete', 'failed'] as const;
/**
 * installing: the incoming release, being loaded; loaded: every image pulled and pinned, the
 * cluster not yet upgraded to it; running: what the cluster runs (the outgoing release while
 * another one is installing or loaded); complete: the cluster's upgrade to it is complete (it is
 * now what runs); failed: loading it failed.
 */
export type HistoryState = (typeof HISTORY_STATES)[number];

export interface HistoryEntry {
  version: string;
  state: HistoryState;
  digest?: string;
  /** When the entry last changed state. */
  at: string;
}

/**
 * What this node's container runtime holds, read through the CRI (ListImages) when a load ends
 * and published in a bounded form (issue #38): counts, one digest of the whole list of names (two
 * nodes with the same digest hold the same names), the names of the loaded bundles that are
 * missing or unpinned, and a short fingerprint of every name held (holdings.ts), so the admin can
 * ask "does this node hold image X, pinned?" of 1,000 images in a few tens of KiB.
 */
export interface RuntimeHoldings {
  /** When the runtime was read. */
  observedAt: string;
  /** Images the runtime lists. */
  images: number;
  /** Of them, pinned (exempt from the image GC). */
  pinned: number;
  /** Distinct names (repo tags and repo digests) of those images. */
  references: number;
  /** sha256:… over those names, sorted, one a line. */
  digest: string;
  /** The runtime reports pins at all (false: CRI-O before 1.28, containerd before 1.6.22): unpinned then means "not known". */
  pinsReported: boolean;
  /** The names the agent loaded and pins (its bundles, releases still in use): which are not in the store, which are not pinned. */
  bundle: { refs: number; missing: string[]; unpinned: string[]; truncated: boolean };
  /** Fingerprints (holdings.ts heldKey) of every name the runtime holds, pinned or not; truncated: some left out. */
  held: { pinned: string[]; unpinned: string[]; truncated: boolean };
}

export interface NodeStatus {
  node: string;
  phase: Phase;
  bundle?: BundleIdentity;
  conditions: Condition[];
  progress: Progress;
  history: HistoryEntry[];
  /** One plain sentence for the technician. */
  message: string;
  updatedAt: string;
  /** metadata.generation of the cluster object the status was written against (set by the reporter). */
  observedGeneration?: number;
  /** What this node can serve to its peers, when it serves. */
  serving?: ServingStatus;
  /** Its part in bundles between nodes, while peers are enabled. */
  peers?: PeersStatus;
  /** What its container runtime held when the last load ended. */
  runtime?: RuntimeHoldings;
}

export function emptyStatus(node: string, now = new Date()): NodeStatus {
  return {
    node,
    phase: 'Idle',
    conditions: [],
    progress: { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 },
    history: [],
    message: 'Waiting for a USB stick with an update bundle.',
    updatedAt: now.toISOString(),
  };
}
