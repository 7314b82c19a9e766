/**
 * The cluster object for one node's status: a cluster-scoped NodeBundleStatus named after the
 * node (deploy/crd.yaml). `toResource` turns the agent's NodeStatus into the object the reporter
 * applies, bounded so that it always fits the CRD's schema (strings cut, lists capped, numbers
 * made non-negative integers).
 */
import { isIP } from 'node:net';
import { boundHoldings } from './holdings.js';
import {
  BUNDLE_MODES,
  type BundleIdentity,
  type Condition,
  type HistoryEntry,
  type NodeStatus,
  type PeersStatus,
  type Phase,
  type Progress,
  type ServingStatus,
} from './model.js';

export const GROUP = 'bundles.offline-bundle.io';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = 'NodeBundleStatus';
export const PLURAL = 'nodebundlestatuses';

/** Bounds shared with deploy/crd.yaml (the contract test checks they agree). */
export const LIMITS = {
  nodeName: 253,
  file: 4096,
  name: 1024,
  version: 128,
  arch: 32,
  media: 1024,
  reason: 1024,
  conditionMessage: 4096,
  message: 1024,
  conditions: 16,
  history: 16,
  // The agent-written fields with known values (no enum in the CRD, so a newer agent's new value
  // is accepted): bounded all the same, well above the longest known value.
  phase: 64,
  mode: 32,
  conditionType: 316,
  conditionStatus: 16,
  historyState: 32,
  /** bundle.fromPeers: the nodes a fetched bundle came from. */
  fromPeers: 16,
  /** bundle.path: the releases of an update path (format's MAX_RELEASE_PATH_HOPS), each a version. */
  path: 4,
  /** serving.address: the longest textual IPv6 address. */
  address: 45,
  /** peers.transfer.fetchedFrom and peers.transfer.suspect: nodes listed. */
  peerNodes: 16,
  /** peers.problem.message. */
  peerProblem: 1024,
} as const;

/** The host ports a node may serve its peers on (issue #22): a published port outside is ignored by every fetching node. */
export const PEER_PORT_MIN = 9000;
export const PEER_PORT_MAX = 9999;

export const isPeerPort = (port: unknown): port is number =>
  Number.isInteger(port) && (port as number) >= PEER_PORT_MIN && (port as number) <= PEER_PORT_MAX;

/**
 * The `required` lists of deploy/crd.yaml, by schema location ("[]" is a list's items). The
 * reporter uses them to tell which refused fields it can leave out; the contract test checks
 * they match the CRD.
 */
export const REQUIRED: Readonly<Record<string, readonly string[]>> = {
  status: ['node', 'phase', 'conditions', 'progress', 'history', 'message', 'updatedAt'],
  'status.bundle': ['file'],
  'status.conditions[]': ['type', 'status', 'reason', 'message', 'lastTransitionTime'],
  'status.progress': ['bytesDone', 'bytesTotal', 'imagesDone', 'imagesTotal'],
  'status.history[]': ['version', 'state', 'at'],
  'status.serving': ['manifestDigest', 'complete', 'verifiedBlobs', 'address', 'port'],
};

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const REASON = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** Kubernetes node names (and so our object names) are DNS-1123 subdomains. */
export function isValidNodeName(node: string): boolean {
  return node.length > 0 && node.length <= LIMITS.nodeName && DNS_SUBDOMAIN.test(node);
}

export interface ResourceProgress extends Progress {
  /** Percent of the current step ("42%"), for the Progress printer column. */
  percent?: string;
}

export interface ResourceStatus extends Omit<NodeStatus, 'progress'> {
  progress: ResourceProgress;
  /** How often the reporter writes when nothing changes (its heartbeat). */
  heartbeatSeconds?: number;
}

export interface NodeBundleStatusResource {
  apiVersion: typeof API_VERSION;
  kind: typeof KIND;
  metadata: { name: string; labels?: Record<string, string> };
  status: ResourceStatus;
}

/** Cuts a string to at most `max` code points (the unit OpenAPI maxLength counts). */
export function truncate(s: string, max: number): string {
  const cps = Array.from(s);
  if (cps.length <= max) return s;
  return cps.slice(0, max - 1).join('') + '…';
}

/** A condition reason as Kubernetes wants it (CamelCase-ish, ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$). */
export function conditionReason(reason: string): string {
  const r = reason
    .replace(/[^A-Za-z0-9_,:]/g, '')
    .replace(/^[^A-Za-z]+/, '')
    .slice(0, LIMITS.reason)
    .replace(/[,:]+$/, '');
  return REASON.test(r) ? r : 'Unknown';
}

function count(n: number | undefined): number {
  return typeof n === 'number' && Number.isFinite(n) && n > 0
    ? Math.min(Math.round(n), Number.MAX_SAFE_INTEGER)
    : 0;
}

/**
 * Percent of the current step: bytes while verifying or staging, images while pre-loading or
 * pinning, 100% once Ready; undefined while nothing is measured.
 */
export function progressPercent(phase: Phase, p: Progress): number | undefined {
  if (phase === 'Ready') return 100;
  if (phase === 'Idle') return undefined;
  const images =
    phase === 'Serving' ||
    phase === 'Preloading' ||
    phase === 'Pinning' ||
    (phase === 'Failed' && count(p.imagesTotal) > 0);
  const [done, total] = images
    ? [count(p.imagesDone), count(p.imagesTotal)]
    : [count(p.bytesDone), count(p.bytesTotal)];
  if (total === 0) return undefined;
  return Math.max(0, Math.min(100, Math.floor((done / total) * 100)));
}

function bundleOf(b: BundleIdentity): BundleIdentity {
  const out: BundleIdentity = { file: truncate(b.file || '-', LIMITS.file) };
  if (b.name) out.name = truncate(b.name, LIMITS.name);
  if (b.version) out.version = truncate(b.version, LIMITS.version);
  if (b.arch) out.arch = truncate(b.arch, LIMITS.arch);
  if (b.digest && DIGEST.test(b.digest)) out.digest = b.digest;
  if (b.signer && DIGEST.test(b.signer)) out.signer = b.signer;
  if (b.media) out.media = truncate(b.media, LIMITS.media);
  if (b.mode && (BUNDLE_MODES as readonly string[]).includes(b.mode)) out.mode = b.mode;
  const peers = [...new Set(b.fromPeers ?? [])].filter(isValidNodeName).slice(0, LIMITS.fromPeers);
  if (peers.length) out.fromPeers = peers;
  // a path is whole or left out: a cut one would name another path
  const path = b.path ?? [];
  if (
    path.length >= 2 &&
    path.length <= LIMITS.path &&
    path.every((v) => typeof v === 'string' && v.length > 0 && v.length <= LIMITS.version)
  )
    out.path = [...path];
  return out;
}

/** What the node serves, or undefined when any part of it is not what the CRD accepts (a peer would ignore it anyway). */
function servingOf(s: ServingStatus | undefined): ServingStatus | undefined {
  if (
    !s ||
    !DIGEST.test(s.manifestDigest) ||
    isIP(s.address) === 0 ||
    s.address.length > LIMITS.address ||
    !isPeerPort(s.port)
  )
    return undefined;
  return {
    manifestDigest: s.manifestDigest,
    complete: s.complete === true,
    verifiedBlobs: count(s.verifiedBlobs),
    address: s.address,
    port: s.port,
  };
}

/** status.peers, bounded: node names valid and at most LIMITS.peerNodes of each list (the largest senders first). */
function peersOf(p: PeersStatus): PeersStatus {
  const t = p.transfer;
  const fetchedFrom = t.fetchedFrom
    .filter((f) => isValidNodeName(f.node))
    .map((f) => ({ node: f.node, bytes: count(f.bytes) }))
    .sort((a, b) => b.bytes - a.bytes)
    .slice(0, LIMITS.peerNodes);
  return {
    up: p.up === true,
    ...(p.problem
      ? {
          problem: {
            reason: conditionReason(p.problem.reason),
            message: truncate(p.problem.message, LIMITS.peerProblem),
          },
        }
      : {}),
    transfer: {
      bytesServed: count(t.bytesServed),
      bytesFetched: count(t.bytesFetched),
      fetchedFrom,
      suspect: [...new Set(t.suspect)].filter(isValidNodeName).slice(0, LIMITS.peerNodes),
    },
    ...(p.copies
      ? {
          copies: {
            version: truncate(p.copies.version, LIMITS.version),
            nodes: count(p.copies.nodes),
            serving: p.copies.serving === true,
          },
        }
      : {}),
  };
}

function conditionsOf(
  conditions: readonly Condition[],
  generation: number | undefined,
): Condition[] {
  // A list-map keyed by type: one entry per type (the last one wins), in first-seen order.
  const byType = new Map<string, Condition>();
  for (const c of conditions) byType.set(c.type, c);
  return [...byType.values()].slice(-LIMITS.conditions).map((c) => {
    const og = c.observedGeneration ?? generation;
    return {
      type: c.type,
      status: c.status,
      reason: conditionReason(c.reason),
      message: truncate(c.message, LIMITS.conditionMessage),
      lastTransitionTime: c.lastTransitionTime,
      ...(og !== undefined ? { observedGeneration: count(og) } : {}),
    };
  });
}

function historyOf(history: readonly HistoryEntry[]): HistoryEntry[] {
  return history
    .filter((e) => e.version)
    .slice(-LIMITS.history)
    .map((e) => ({
      version: truncate(e.version, LIMITS.version),
      state: e.state,
      ...(e.digest && DIGEST.test(e.digest) ? { digest: e.digest } : {}),
      at: e.at,
    }));
}

/**
 * The NodeBundleStatus object for `node` carrying `status` (for a server-side apply of the
 * status subresource). `opts.generation`, the object's metadata.generation as the API server
 * returned it, becomes status.observedGeneration and each condition's observedGeneration.
 * Throws a TypeError when `node` is not a valid Kubernetes object name.
 */
export function toResource(
  status: NodeStatus,
  node: string,
  opts: { generation?: number; heartbeatSeconds?: number } = {},
): NodeBundleStatusResource {
  if (!isValidNodeName(node))
    throw new TypeError(
      `node name ${JSON.stringify(node)} is not a DNS-1123 subdomain (lowercase letters, digits, '-', '.'; at most 253)`,
    );
  const generation = opts.generation ?? status.observedGeneration;
  const p = status.progress;
  const progress: ResourceProgress = {
    bytesDone: count(p.bytesDone),
    bytesTotal: count(p.bytesTotal),
    imagesDone: count(p.imagesDone),
    imagesTotal: count(p.imagesTotal),
  };
  if (p.rate !== undefined && Number.isFinite(p.rate)) progress.rate = count(p.rate);
  if (p.etaSeconds !== undefined && Number.isFinite(p.etaSeconds))
    progress.etaSeconds = count(p.etaSeconds);
  const percent = progressPercent(status.phase, p);
  if (percent !== undefined) progress.percent = `${percent}%`;
  const serving = servingOf(status.serving);
  // what the runtime holds, bounded (held.* capped, names cut out, not cut short)
  const runtime = status.runtime ? boundHoldings(status.runtime) : undefined;
  const out: ResourceStatus = {
    node,
    phase: status.phase,
    ...(status.bundle ? { bundle: bundleOf(status.bundle) } : {}),
    conditions: conditionsOf(status.conditions, generation),
    progress,
    history: historyOf(status.history),
    message: truncate(status.message, LIMITS.message),
    updatedAt: status.updatedAt,
    ...(opts.heartbeatSeconds
      ? { heartbeatSeconds: Math.min(86_400, Math.max(1, count(opts.heartbeatSeconds))) }
      : {}),
    ...(generation !== undefined ? { observedGeneration: count(generation) } : {}),
    ...(serving ? { serving } : {}),
    ...(status.peers ? { peers: peersOf(status.peers) } : {}),
    ...(runtime ? { runtime } : {}),
  };
  return { apiVersion: API_VERSION, kind: KIND, metadata: { name: node }, status: out };
}
