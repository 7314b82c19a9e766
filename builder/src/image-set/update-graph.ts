import { maxSatisfying, rcompare, satisfies, valid, validRange } from 'semver';
import { OciError } from '@offline-bundle/oci';
import { HostError, assertNesting, readSmallFile } from '@offline-bundle/host';

/**
 * Largest update graph read: the graph service's answer for one channel is some hundred KiB,
 * every channel of every version a few MiB.
 */
export const MAX_UPDATE_GRAPH_BYTES = 32 * 1024 * 1024;

/** Where a release's channels are listed in a graph node's metadata (the graph service's key). */
const CHANNELS_KEY = 'io.openshift.upgrades.graph.release.channels';

interface GraphNode { version: string; payload: string; channels?: string[] }

/** A Cincinnati update graph: releases (version, payload pull spec) and the upgrade edges between them. */
export interface UpdateGraph {
  file: string;
  nodes: GraphNode[];
  edges: [number, number][];
}

export interface ReleaseChoice {
  channel: string;
  version?: string;
  versionRange?: string;
}

export interface ResolvedRelease {
  version: string;
  /** The payload's pull spec, by digest as the graph names it. */
  payload: string;
  /** Versions of the channel the choice allowed and that this bundle does not carry (a bundle holds one release). */
  skipped: string[];
  /** Versions with an edge into this one in the graph. */
  upgradeFrom: string[];
}

function bad(file: string, what: string): OciError {
  return new OciError('INVALID_CONFIG', `${file} is not an update graph: ${what} (save the graph service's JSON answer: curl -H 'Accept: application/json' 'https://api.openshift.com/api/upgrades_info/v1/graph?channel=CHANNEL&arch=amd64')`);
}

function parseNode(raw: unknown, i: number, file: string): GraphNode {
  const n = raw as { version?: unknown; payload?: unknown; metadata?: Record<string, unknown> };
  if (typeof n?.version !== 'string' || !valid(n.version)) throw bad(file, `nodes[${i}] has no semver version`);
  if (typeof n.payload !== 'string' || !n.payload) throw bad(file, `nodes[${i}] (${n.version}) has no payload`);
  const channels = n.metadata?.[CHANNELS_KEY];
  return { version: n.version, payload: n.payload, ...(typeof channels === 'string' ? { channels: channels.split(',').map((c) => c.trim()).filter(Boolean) } : {}) };
}

export async function readUpdateGraph(file: string): Promise<UpdateGraph> {
  let doc: { nodes?: unknown; edges?: unknown };
  try {
    const text = (await readSmallFile(file, MAX_UPDATE_GRAPH_BYTES)).bytes.toString('utf8');
    assertNesting(text, 'json', file);
    doc = JSON.parse(text) as typeof doc;
  } catch (cause) {
    if (cause instanceof HostError && (cause.code === 'FILE_TOO_LARGE' || cause.code === 'TOO_DEEPLY_NESTED')) throw cause;
    throw new OciError('INVALID_CONFIG', `cannot read the update graph ${file}: ${(cause as Error).message}`, { cause });
  }
  if (!Array.isArray(doc?.nodes)) throw bad(file, 'it has no "nodes" list');
  const nodes = doc.nodes.map((n, i) => parseNode(n, i, file));
  // a version is one release: two payloads for it leave the choice to the order of the file
  const payloadOf = new Map<string, [number, string]>();
  for (const [i, n] of nodes.entries()) {
    const seen = payloadOf.get(n.version);
    if (seen && seen[1] !== n.payload) throw bad(file, `nodes[${seen[0]}] and nodes[${i}] give version ${n.version} different payloads`);
    payloadOf.set(n.version, [i, n.payload]);
  }
  const edges = doc.edges === undefined ? [] : doc.edges;
  if (!Array.isArray(edges)) throw bad(file, '"edges" is not a list');
  for (const [i, e] of edges.entries()) {
    if (!Array.isArray(e) || e.length !== 2 || !e.every((x) => Number.isInteger(x) && x >= 0 && x < nodes.length)) throw bad(file, `edges[${i}] is not a pair of node indexes`);
  }
  return { file, nodes, edges: edges as [number, number][] };
}

/**
 * The release a channel and version (or version range, or neither: the channel's newest) name in
 * the graph. Nodes list their channels in metadata; a graph whose nodes list none is taken as
 * the one channel's graph (the service answers ?channel= with that channel's releases).
 */
export function resolveRelease(graph: UpdateGraph, choice: ReleaseChoice, where: string): ResolvedRelease {
  const listed = graph.nodes.some((n) => n.channels);
  const inChannel = listed ? graph.nodes.filter((n) => n.channels?.includes(choice.channel)) : graph.nodes;
  if (inChannel.length === 0) {
    const known = [...new Set(graph.nodes.flatMap((n) => n.channels ?? []))].sort();
    throw new OciError('NOT_FOUND', `${where}: channel ${choice.channel} is not in the update graph ${graph.file} (it has: ${known.join(', ') || 'none'})`);
  }
  const versions = inChannel.map((n) => n.version).sort(rcompare);
  let range = '*';
  if (choice.versionRange !== undefined) {
    if (!validRange(choice.versionRange)) throw new OciError('INVALID_CONFIG', `${where}: "${choice.versionRange}" is not a semver range (">=4.14.30 <4.15.0")`);
    range = choice.versionRange;
  }
  const wanted = choice.version ?? maxSatisfying(versions, range);
  const node = inChannel.find((n) => n.version === wanted);
  if (!node) {
    const asked = choice.version !== undefined ? `version ${choice.version}` : `no version in ${range}`;
    throw new OciError('NOT_FOUND', `${where}: ${asked} in channel ${choice.channel} of ${graph.file} (it has ${versions.slice(0, 5).join(', ')}${versions.length > 5 ? ', …' : ''})`);
  }
  const index = graph.nodes.indexOf(node);
  return {
    version: node.version,
    payload: node.payload,
    skipped: choice.version !== undefined || choice.versionRange === undefined ? [] : versions.filter((v) => v !== node.version && satisfies(v, range)),
    upgradeFrom: graph.edges.filter(([, to]) => to === index).map(([from]) => graph.nodes[from]!.version).sort(rcompare),
  };
}
