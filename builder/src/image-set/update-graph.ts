import { maxSatisfying, rcompare, satisfies, valid, validRange } from 'semver';
import { OciError } from '@offline-bundle/oci';
import { HostError, assertNesting, readSmallFile } from '@offline-bundle/host';
import { someOf } from './schema.js';

/**
 * Largest update graph read: the graph service's answer for one channel is some hundred KiB,
 * every channel of every version a few MiB.
 */
const MAX_UPDATE_GRAPH_BYTES = 32 * 1024 * 1024;

/** Where a release's channels are listed in a graph node's metadata (the graph service's key). */
const CHANNELS_KEY = 'io.openshift.upgrades.graph.release.channels';

interface GraphNode {
  version: string;
  payload: string;
  channels?: string[];
}

/** A Cincinnati update graph: releases (version, payload pull spec) and the upgrade edges between them. */
interface UpdateGraph {
  file: string;
  nodes: GraphNode[];
  edges: [number, number][];
}

interface ReleaseChoice {
  channel: string;
  version?: string;
  versionRange?: string;
  /** The version the cluster runs: the bundle carries the graph's path from it (resolvePath). */
  from?: string;
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
  return new OciError(
    'INVALID_CONFIG',
    `${file} is not an update graph: ${what} (save the graph service's JSON answer: curl -H 'Accept: application/json' 'https://api.openshift.com/api/upgrades_info/v1/graph?channel=CHANNEL&arch=amd64')`,
  );
}

function parseNode(raw: unknown, i: number, file: string): GraphNode {
  const n = raw as { version?: unknown; payload?: unknown; metadata?: Record<string, unknown> };
  if (typeof n?.version !== 'string' || !valid(n.version))
    throw bad(file, `nodes[${i}] has no semver version`);
  if (typeof n.payload !== 'string' || !n.payload)
    throw bad(file, `nodes[${i}] (${n.version}) has no payload`);
  const channels = n.metadata?.[CHANNELS_KEY];
  return {
    version: n.version,
    payload: n.payload,
    ...(typeof channels === 'string'
      ? {
          channels: channels
            .split(',')
            .map((c) => c.trim())
            .filter(Boolean),
        }
      : {}),
  };
}

export async function readUpdateGraph(file: string): Promise<UpdateGraph> {
  let doc: { nodes?: unknown; edges?: unknown };
  try {
    const text = (await readSmallFile(file, MAX_UPDATE_GRAPH_BYTES)).bytes.toString('utf8');
    assertNesting(text, 'json', file);
    doc = JSON.parse(text) as typeof doc;
  } catch (cause) {
    if (
      cause instanceof HostError &&
      (cause.code === 'FILE_TOO_LARGE' || cause.code === 'TOO_DEEPLY_NESTED')
    )
      throw cause;
    throw new OciError(
      'INVALID_CONFIG',
      `cannot read the update graph ${file}: ${(cause as Error).message}`,
      { cause },
    );
  }
  if (!Array.isArray(doc?.nodes)) throw bad(file, 'it has no "nodes" list');
  const nodes = doc.nodes.map((n, i) => parseNode(n, i, file));
  // a version is one release: two payloads for it leave the choice to the order of the file
  const payloadOf = new Map<string, [number, string]>();
  for (const [i, n] of nodes.entries()) {
    const seen = payloadOf.get(n.version);
    if (seen && seen[1] !== n.payload)
      throw bad(
        file,
        `nodes[${seen[0]}] and nodes[${i}] give version ${n.version} different payloads`,
      );
    payloadOf.set(n.version, [i, n.payload]);
  }
  const edges = doc.edges === undefined ? [] : doc.edges;
  if (!Array.isArray(edges)) throw bad(file, '"edges" is not a list');
  for (const [i, e] of edges.entries()) {
    if (
      !Array.isArray(e) ||
      e.length !== 2 ||
      !e.every((x) => Number.isInteger(x) && x >= 0 && x < nodes.length)
    )
      throw bad(file, `edges[${i}] is not a pair of node indexes`);
  }
  return { file, nodes, edges: edges as [number, number][] };
}

/** The graph's nodes in `channel`; all of them when no node lists its channels (one channel's graph). */
function channelNodes(graph: UpdateGraph, channel: string): UpdateGraph['nodes'] {
  return graph.nodes.some((n) => n.channels)
    ? graph.nodes.filter((n) => n.channels?.includes(channel))
    : graph.nodes;
}

/**
 * The release a channel and version (or version range, or neither: the channel's newest) name in
 * the graph. Nodes list their channels in metadata; a graph whose nodes list none is taken as
 * the one channel's graph (the service answers ?channel= with that channel's releases).
 */
export function resolveRelease(
  graph: UpdateGraph,
  choice: ReleaseChoice,
  where: string,
): ResolvedRelease {
  const inChannel = channelNodes(graph, choice.channel);
  if (inChannel.length === 0) {
    const known = [...new Set(graph.nodes.flatMap((n) => n.channels ?? []))].sort();
    throw new OciError(
      'NOT_FOUND',
      `${where}: channel ${choice.channel} is not in the update graph ${graph.file} (it has: ${known.join(', ') || 'none'})`,
    );
  }
  const versions = inChannel.map((n) => n.version).sort(rcompare);
  let range = '*';
  if (choice.versionRange !== undefined) {
    if (!validRange(choice.versionRange))
      throw new OciError(
        'INVALID_CONFIG',
        `${where}: "${choice.versionRange}" is not a semver range (">=4.14.30 <4.15.0")`,
      );
    range = choice.versionRange;
  }
  const wanted = choice.version ?? maxSatisfying(versions, range);
  const node = inChannel.find((n) => n.version === wanted);
  if (!node) {
    const asked =
      choice.version !== undefined ? `version ${choice.version}` : `no version in ${range}`;
    throw new OciError(
      'NOT_FOUND',
      `${where}: ${asked} in channel ${choice.channel} of ${graph.file} (it has ${versions.slice(0, 5).join(', ')}${versions.length > 5 ? ', …' : ''})`,
    );
  }
  const index = graph.nodes.indexOf(node);
  return {
    version: node.version,
    payload: node.payload,
    skipped:
      choice.version !== undefined || choice.versionRange === undefined
        ? []
        : versions.filter((v) => v !== node.version && satisfies(v, range)),
    upgradeFrom: graph.edges
      .filter(([, to]) => to === index)
      .map(([from]) => graph.nodes[from]!.version)
      .sort(rcompare),
  };
}

/** One release of an update path, as the graph names it. */
export interface PathHop {
  version: string;
  payload: string;
}

/** Versions linked by the graph's edges into `hops` (the versions a path may go to), each way, newest first. */
function linked(graph: UpdateGraph, reverse: boolean, hops: Set<string>): Map<string, string[]> {
  const out = new Map<string, Set<string>>();
  for (const [a, b] of graph.edges) {
    if (!hops.has(graph.nodes[b]!.version)) continue;
    const [from, to] = reverse
      ? [graph.nodes[b]!.version, graph.nodes[a]!.version]
      : [graph.nodes[a]!.version, graph.nodes[b]!.version];
    if (!out.has(from)) out.set(from, new Set());
    out.get(from)!.add(to);
  }
  return new Map([...out].map(([v, s]) => [v, [...s].sort(rcompare)]));
}

/** Breadth first from `start`, at most `depth` edges: each version reached, with the one it was reached from. */
function reach(
  next: Map<string, string[]>,
  start: string,
  depth: number,
): Map<string, string | null> {
  const parent = new Map<string, string | null>([[start, null]]);
  let level = [start];
  for (let d = 0; d < depth && level.length; d++) {
    const following: string[] = [];
    for (const v of level) {
      for (const w of next.get(v) ?? []) {
        if (parent.has(w)) continue;
        parent.set(w, v);
        following.push(w);
      }
    }
    level = following;
  }
  return parent;
}

/**
 * The update path from `from` (the version the cluster runs) to `to`, as the graph's edges say,
 * through releases of `channel` only: the fewest hops, at most `maxHops` of them; among paths as short, the one
 * through the newest releases. The releases after `from`, `to` last. A path the graph does not
 * have is refused naming the edge it lacks: from what `from` reaches to what reaches `to`.
 */
export function resolvePath(
  graph: UpdateGraph,
  channel: string,
  from: string,
  to: string,
  maxHops: number,
  where: string,
): PathHop[] {
  const payload = new Map(graph.nodes.map((n) => [n.version, n.payload]));
  if (!payload.has(from))
    throw new OciError(
      'NOT_FOUND',
      `${where}: ${from} (the version the cluster runs) is not in the update graph ${graph.file}: save the graph of a channel that holds it and the release (eus-4.16 for 4.14 → 4.16)`,
    );
  if (from === to)
    throw new OciError(
      'INVALID_CONFIG',
      `${where}: the path starts at ${from}, the release itself: give the version the cluster runs, an earlier one`,
    );
  // each hop a release of the channel, as the release itself is: not a candidate the graph also lists
  const hops = new Set(channelNodes(graph, channel).map((n) => n.version));
  const parent = reach(linked(graph, false, hops), from, maxHops);
  if (!parent.has(to)) {
    const reached = [...parent.keys()].filter((v) => v !== to).sort(rcompare);
    const reaching = [...reach(linked(graph, true, hops), to, maxHops - 1).keys()]
      .filter((v) => v !== to)
      .sort(rcompare);
    throw new OciError(
      'NOT_FOUND',
      `${where}: the update graph ${graph.file} has no path from ${from} to ${to} in at most ${maxHops} hops: it lacks an edge from ${someOf(reached, 5)} (what ${from} reaches) to ${someOf([to, ...reaching], 5)} (what reaches ${to}); save the graph of the channel that holds the intermediate release (eus-4.16 for 4.14 → 4.16), or pick a release ${from} reaches`,
    );
  }
  const path: PathHop[] = [];
  for (let v: string | null = to; v !== null && v !== from; v = parent.get(v) ?? null)
    path.unshift({ version: v, payload: payload.get(v)! });
  return path;
}
