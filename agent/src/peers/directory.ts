/**
 * The PeerDirectory over the Kubernetes API, as the node itself (the kubelet's identity, or its
 * per-node ServiceAccount): BundleApprovals say which bundles may be fetched at all, the other
 * nodes' NodeBundleStatus `status.serving` says who serves one, and each claim is checked
 * against the publishing node's Node object, which only the kubelet of that node and admins can
 * write: a node that publishes another address (to point its peers at a machine outside the
 * cluster) or a port outside 9000–9999 is ignored. Every call goes through the bounded client
 * (packages/status cluster-http.ts: deadline, answer size, list items).
 */
import {
  APPROVAL_PLURAL,
  GROUP,
  isPeerPort,
  isValidNodeName,
  pickApproval,
  PLURAL,
  VERSION,
} from '@offline-bundle/status';
import { adminApis, apiCall, ClusterError, listAll, type AdminApis } from '@offline-bundle/kube';
import type { PeerApproval, PeerDirectory, PeerEndpoint } from './types.js';

/** The Node labels that make a node control-plane (the second: clusters before Kubernetes 1.24, OpenShift's masters). */
const CONTROL_PLANE_LABELS = [
  'node-role.kubernetes.io/control-plane',
  'node-role.kubernetes.io/master',
] as const;

/** One directory call's API request: short, so a lost API server never holds a fetch long. */
export const DIRECTORY_REQUEST_MS = 10_000;

export interface ApiPeerDirectoryOptions {
  /** This node's name (its Node, its NodeBundleStatus): never returned as a peer. */
  node: string;
  /** The node's kubeconfig (status.kubeconfig). */
  kubeconfig: string;
  context?: string;
  requestTimeoutMs?: number;
}

/** A NodeBundleStatus reduced to what discovery reads. */
export interface ServingClaim {
  node: string;
  manifestDigest?: string;
  complete: boolean;
  verifiedBlobs: number;
  address?: string;
  port?: unknown;
}

const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};

function pickClaim(item: Record<string, unknown>): ServingClaim {
  const st = obj(item.status);
  const s = obj(st.serving);
  const name = str(obj(item.metadata).name) ?? '';
  const blobs = s.verifiedBlobs;
  return {
    // status.node must equal the name (the CRD's rule): a status naming another node claims nothing
    node: str(st.node) === name ? name : '',
    ...(str(s.manifestDigest) ? { manifestDigest: str(s.manifestDigest) } : {}),
    complete: s.complete === true,
    verifiedBlobs:
      typeof blobs === 'number' && Number.isSafeInteger(blobs) && blobs > 0 ? blobs : 0,
    ...(str(s.address) ? { address: str(s.address) } : {}),
    port: s.port,
  };
}

/** The Node's Ready condition is True: the kubelet reported within the node-monitor grace period. */
function nodeReady(item: Record<string, unknown>): boolean {
  const conditions = Array.isArray(obj(item.status).conditions)
    ? (obj(item.status).conditions as unknown[])
    : [];
  return conditions.map(obj).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** A Node's InternalIP addresses. */
function pickInternalIps(item: Record<string, unknown>): { node: string; ips: string[] } {
  const addresses = Array.isArray(obj(item.status).addresses)
    ? (obj(item.status).addresses as unknown[])
    : [];
  return {
    node: str(obj(item.metadata).name) ?? '',
    ips: addresses
      .map(obj)
      .filter((a) => a.type === 'InternalIP')
      .map((a) => str(a.address))
      .filter((a): a is string => !!a)
      .slice(0, 16),
  };
}

const urlOf = (address: string, port: number) =>
  `https://${address.includes(':') ? `[${address}]` : address}:${port}`;

/**
 * The peers of `manifestDigest` among `claims` (pure: what tests drive with any objects): never
 * `self`, only valid node names whose claimed address is one of their Node's InternalIPs and
 * whose port is a peer port; complete ones first, then by verified blobs, then by name.
 */
export function selectPeers(
  self: string,
  manifestDigest: string,
  claims: readonly ServingClaim[],
  internalIps: ReadonlyMap<string, readonly string[]>,
): PeerEndpoint[] {
  const out: PeerEndpoint[] = [];
  for (const c of claims) {
    if (c.node === self || !isValidNodeName(c.node) || c.manifestDigest !== manifestDigest)
      continue;
    if (!c.address || !(internalIps.get(c.node) ?? []).includes(c.address) || !isPeerPort(c.port))
      continue;
    out.push({
      node: c.node,
      url: urlOf(c.address, c.port),
      complete: c.complete,
      verifiedBlobs: c.verifiedBlobs,
    });
  }
  return out.sort(
    (a, b) =>
      Number(b.complete) - Number(a.complete) ||
      b.verifiedBlobs - a.verifiedBlobs ||
      (a.node < b.node ? -1 : 1),
  );
}

export class ApiPeerDirectory implements PeerDirectory {
  private apis?: AdminApis;

  constructor(private readonly opts: ApiPeerDirectoryOptions) {
    if (!isValidNodeName(opts.node))
      throw new TypeError(`node name ${JSON.stringify(opts.node)} is not a DNS-1123 subdomain`);
  }

  async approved(): Promise<PeerApproval[]> {
    const items = await this.call((apis) =>
      listAll(
        `list ${APPROVAL_PLURAL}.${GROUP}`,
        (q) =>
          apis.custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural: APPROVAL_PLURAL,
            ...q,
          }),
        pickApproval,
        { notFound: () => [] },
      ),
    );
    return items.flatMap((a) =>
      a ? [{ manifestDigest: a.manifestDigest, version: a.version, signer: a.signer }] : [],
    );
  }

  async peersFor(manifestDigest: string): Promise<PeerEndpoint[]> {
    return this.call(async (apis) => {
      const claims = await listAll(
        `list ${PLURAL}.${GROUP}`,
        (q) =>
          apis.custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural: PLURAL,
            ...q,
          }),
        pickClaim,
        { notFound: () => [] },
      );
      if (!claims.some((c) => c.node !== this.opts.node && c.manifestDigest === manifestDigest))
        return [];
      // a Node that is not Ready (powered off, its kubelet gone) serves nobody, whatever its last status said
      const nodes = await listAll(
        'list nodes',
        (q) => apis.core.listNode(q),
        (item) =>
          nodeReady(item)
            ? pickInternalIps(item)
            : { node: str(obj(item.metadata).name) ?? '', ips: [] },
      );
      return selectPeers(
        this.opts.node,
        manifestDigest,
        claims,
        new Map(nodes.map((n) => [n.node, n.ips])),
      );
    });
  }

  /** This node's own InternalIP (the address it publishes in status.serving); undefined when its Node has none. */
  async ownAddress(): Promise<string | undefined> {
    return (await this.ownNode()).address;
  }

  /** This node's InternalIP and whether its Node is labelled a control-plane node (peers.controlPlaneDownloaders applies). */
  async ownNode(): Promise<{ address?: string; controlPlane: boolean }> {
    const n = obj(
      await this.call((apis) =>
        apiCall(`read Node ${this.opts.node}`, () => apis.core.readNode({ name: this.opts.node })),
      ),
    );
    const labels = obj(obj(n.metadata).labels);
    const address = pickInternalIps(n).ips[0];
    return {
      ...(address ? { address } : {}),
      controlPlane: CONTROL_PLANE_LABELS.some((l) => Object.hasOwn(labels, l)),
    };
  }

  private async connect(): Promise<AdminApis> {
    const { kubeconfig, context } = this.opts;
    try {
      return await adminApis(kubeconfig, context, {
        deadlineMs: this.opts.requestTimeoutMs ?? DIRECTORY_REQUEST_MS,
      });
    } catch (cause) {
      throw new ClusterError(
        'KUBECONFIG',
        `cannot use kubeconfig ${kubeconfig}${context ? ` (context ${context})` : ''}: ${(cause as Error).message}: check status.kubeconfig`,
        { cause },
      );
    }
  }

  /** Runs `fn` with the API clients; a refusal or a lost server drops them (the kubelet's certificate rotates). */
  private async call<T>(fn: (apis: AdminApis) => Promise<T>): Promise<T> {
    try {
      this.apis ??= await this.connect();
      return await fn(this.apis);
    } catch (err) {
      this.apis = undefined;
      if (err instanceof ClusterError && err.code === 'FORBIDDEN') {
        // apiCall's fix is the admin's; the node's is the shipped rule that lets nodes read
        throw new ClusterError(
          'FORBIDDEN',
          `${err.message.replace(/: bind your user.*$/, '')}: apply deploy/rbac.yaml (ClusterRole offline-bundle:peer-discovery, bound to group system:nodes)`,
          { cause: err },
        );
      }
      throw err;
    }
  }
}
