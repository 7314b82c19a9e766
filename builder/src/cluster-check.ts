/**
 * `bundle cluster check BUNDLE…`: the registry-free closure as the API shows it. Every image the
 * cluster will ask a node for (every Pod's, every workload template's, every installed
 * operator's relatedImages) must be in one of the bundles, under the name the pod uses, and
 * not pulled with imagePullPolicy Always; and every node must be ready for the first bundle
 * (the roll-up of `status`). What is missing is named with why and who uses it.
 * Per gap, which nodes hold the image anyway, from what each agent publishes of its runtime
 * (cluster-holdings.ts): an image in no bundle held pinned by every node is a lesser gap (low),
 * held unpinned somewhere the image GC may take it (medium), missing anywhere it is high; and
 * per node what it holds of the closure, and any image of its bundle it lacks while it says Ready.
 */
import type { Command } from 'commander';
import {
  bundleImageNames,
  nextSteps,
  readRollup,
  type AdminBundle,
  type Rollup,
} from '@offline-bundle/cluster';
import { parseReference, repositoryName } from '@offline-bundle/oci';
import { ClusterError, listAll, type AdminApis } from '@offline-bundle/kube';
import {
  checkNodes,
  inNoBundleSeverity,
  nodeLine,
  whoHolds,
  worst,
  type NodeGap,
  type NodeReport,
  type Severity,
  type WhoHolds,
} from './cluster-holdings.js';

interface ImageUse {
  image: string;
  /** namespace/Kind/name of each object that asks for it. */
  users: string[];
  /** Some user pulls it with imagePullPolicy Always (set or defaulted). */
  pullAlways: boolean;
}

interface ImageGap {
  image: string;
  why: 'InNoBundle' | 'PullAlways' | 'BadReference';
  users: string[];
  message: string;
  /** How bad it is, once who holds it is known (checkClosure). */
  severity?: Severity;
  /** Which nodes hold it anyway (pinned or not), lack it, or do not say; and that in a sentence. */
  nodes?: WhoHolds;
  held?: string;
}

interface Closure {
  /** Images the cluster asks for. */
  needed: number;
  gaps: ImageGap[];
  rollup: Rollup;
  /** Per node: what it holds of the images asked for, and what it lacks and why. */
  perNode: NodeReport[];
  /** Images of a bundle a node loaded that it lacks or does not pin while it says Ready. */
  nodeGaps: NodeGap[];
  /** The worst severity of any gap, or undefined when there is none. */
  severity?: Severity;
  complete: boolean;
  summary: string;
}

type Spec = { containers?: unknown; initContainers?: unknown; ephemeralContainers?: unknown };
/** Who asks for one image, named at most this many times (a DaemonSet's pods on 5,000 nodes are one line's worth). */
const MAX_USERS_NAMED = 20;
const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const list = (v: unknown) => (Array.isArray(v) ? v : []);
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** The kubelet's default when a template sets none: Always for :latest or no tag. */
function pullsAlways(image: string, policy: string | undefined): boolean {
  if (policy) return policy === 'Always';
  const last = image.split('/').pop() ?? '';
  return !image.includes('@') && (!last.includes(':') || last.endsWith(':latest'));
}

/** Adds the images of one pod spec to `uses`, in the name of `user`. */
function addSpec(uses: Map<string, ImageUse>, spec: Spec, user: string): void {
  for (const c of [
    ...list(spec.initContainers),
    ...list(spec.containers),
    ...list(spec.ephemeralContainers),
  ].map(obj)) {
    const image = str(c.image);
    if (!image) continue;
    const u = uses.get(image) ?? { image, users: [], pullAlways: false };
    if (!u.users.includes(user) && u.users.length < MAX_USERS_NAMED) u.users.push(user);
    u.pullAlways ||= pullsAlways(image, str(c.imagePullPolicy));
    uses.set(image, u);
  }
}

const WORKLOADS = [
  { group: 'apps', plural: 'deployments', kind: 'Deployment' },
  { group: 'apps', plural: 'daemonsets', kind: 'DaemonSet' },
  { group: 'apps', plural: 'statefulsets', kind: 'StatefulSet' },
  { group: 'apps', plural: 'replicasets', kind: 'ReplicaSet' },
  { group: 'batch', plural: 'jobs', kind: 'Job' },
] as const;

const who = (o: Record<string, unknown>, kind: string) =>
  `${str(obj(o.metadata).namespace) ?? ''}/${kind}/${str(obj(o.metadata).name) ?? ''}`;

/** Every image the API says the cluster runs or will run, with who asks for it. */
async function readImageUses(apis: AdminApis): Promise<ImageUse[]> {
  const uses = new Map<string, ImageUse>();
  const none = () => [];
  // only what is read of each page is kept: a spec's containers, the name
  const cut = (v: unknown) =>
    list(v)
      .map(obj)
      .map((c) => ({ image: c.image, imagePullPolicy: c.imagePullPolicy }));
  const containersOf = (spec: Record<string, unknown>): Spec => ({
    containers: cut(spec.containers),
    initContainers: cut(spec.initContainers),
    ephemeralContainers: cut(spec.ephemeralContainers),
  });
  const pick =
    (kind: string, at: (o: Record<string, unknown>) => unknown) =>
    (o: Record<string, unknown>) => ({ user: who(o, kind), spec: containersOf(obj(at(o))) });
  for (const p of await listAll(
    'list pods',
    (q) => apis.core.listPodForAllNamespaces(q),
    pick('Pod', (o) => o.spec),
  ))
    addSpec(uses, p.spec, p.user);
  for (const w of WORKLOADS) {
    const items = await listAll(
      `list ${w.plural}.${w.group}`,
      (q) =>
        apis.custom.listCustomObjectForAllNamespaces({
          group: w.group,
          version: 'v1',
          plural: w.plural,
          ...q,
        }),
      pick(w.kind, (o) => obj(obj(o.spec).template).spec),
      { notFound: none },
    );
    for (const x of items) addSpec(uses, x.spec, x.user);
  }
  const crons = await listAll(
    'list cronjobs.batch',
    (q) =>
      apis.custom.listCustomObjectForAllNamespaces({
        group: 'batch',
        version: 'v1',
        plural: 'cronjobs',
        ...q,
      }),
    pick('CronJob', (o) => obj(obj(obj(obj(o.spec).jobTemplate).spec).template).spec),
    { notFound: none },
  );
  for (const x of crons) addSpec(uses, x.spec, x.user);
  // OLM copies a CSV into every namespace it watches: one user per operator is enough
  const csvs = await listAll(
    'list clusterserviceversions.operators.coreos.com',
    (q) =>
      apis.custom.listCustomObjectForAllNamespaces({
        group: 'operators.coreos.com',
        version: 'v1alpha1',
        plural: 'clusterserviceversions',
        ...q,
      }),
    (o) => ({
      user: `/ClusterServiceVersion/${str(obj(o.metadata).name) ?? ''}`,
      images: list(obj(o.spec).relatedImages)
        .map((r) => str(obj(r).image))
        .filter((x): x is string => !!x),
    }),
    { notFound: none },
  );
  for (const c of csvs)
    addSpec(
      uses,
      { containers: c.images.map((image) => ({ image, imagePullPolicy: 'IfNotPresent' })) },
      c.user,
    );
  return [...uses.values()].sort((a, b) => a.image.localeCompare(b.image));
}

/** The closure's gaps among `uses`, against what the bundles hold (pure). */
function imageGaps(
  uses: readonly ImageUse[],
  bundles: readonly Pick<AdminBundle, 'images'>[],
): ImageGap[] {
  const names = bundleImageNames(bundles.flatMap((b) => b.images));
  const gaps: ImageGap[] = [];
  for (const u of uses) {
    let key: string;
    try {
      const ref = parseReference(u.image);
      key = ref.digest
        ? `${repositoryName(ref)}@${ref.digest}`
        : `${repositoryName(ref)}:${ref.tag ?? 'latest'}`;
    } catch {
      gaps.push({
        image: u.image,
        why: 'BadReference',
        users: u.users,
        message: 'not an image reference the runtime can pull',
      });
      continue;
    }
    if (!names.has(key))
      gaps.push({
        image: u.image,
        why: 'InNoBundle',
        users: u.users,
        message:
          'in no bundle given: no node can pull it without a registry (where a node holds it today, the image GC or a crio-wipe takes it for good); add it to a bundle (images:) and load that',
      });
    else if (u.pullAlways)
      gaps.push({
        image: u.image,
        why: 'PullAlways',
        users: u.users,
        message:
          'in the bundle, but pulled with imagePullPolicy: Always, which asks the registry every start: set IfNotPresent',
      });
  }
  return gaps;
}

/** Each gap with who holds its image and how bad it is (a registry asked every start, or a bad name, is always high). */
function rateGaps(gaps: ImageGap[], rollup: Rollup): void {
  const nodes = rollup.rows.map((r) => r.node);
  for (const g of gaps) {
    if (g.why !== 'InNoBundle') {
      g.severity = 'high';
      continue;
    }
    g.nodes = whoHolds(g.image, nodes, rollup.holdings ?? {});
    const s = inNoBundleSeverity(g.nodes);
    g.severity = s.severity;
    g.held = s.held;
  }
}

async function checkClosure(apis: AdminApis, bundles: readonly AdminBundle[]): Promise<Closure> {
  const uses = await readImageUses(apis);
  const gaps = imageGaps(uses, bundles);
  const rollup = await readRollup(apis, { digest: bundles[0]!.fileDigest });
  rateGaps(gaps, rollup);
  const nodes = checkNodes(
    rollup,
    uses.map((u) => u.image),
    {
      inBundles: bundleImageNames(bundles.flatMap((b) => b.images)),
      inFirst: bundleImageNames(bundles[0]!.images),
    },
  );
  const severity = worst([...gaps, ...nodes.gaps].map((g) => g.severity ?? 'high'));
  const complete = gaps.length === 0 && nodes.gaps.length === 0 && rollup.ready;
  const published = nodes.reports.filter((r) => r.published).length;
  const parts = [
    `${uses.length} images the cluster asks for, ${uses.length - gaps.filter((g) => g.why !== 'PullAlways').length} of them in the bundle${bundles.length > 1 ? 's' : ''}`,
    ...(gaps.length ? [`${gaps.length} gap${gaps.length > 1 ? 's' : ''}`] : []),
    ...(nodes.gaps.length
      ? [
          `${nodes.gaps.length} image${nodes.gaps.length > 1 ? 's' : ''} of a loaded bundle missing or unpinned on a node that says Ready`,
        ]
      : []),
    rollup.summary,
    `${published} of ${nodes.reports.length} nodes publish what their runtime holds`,
    ...(severity ? [`worst gap: ${severity}`] : []),
  ];
  return {
    needed: uses.length,
    gaps,
    rollup,
    perNode: nodes.reports,
    nodeGaps: nodes.gaps,
    ...(severity ? { severity } : {}),
    complete,
    summary: parts.join('; '),
  };
}

/** The text report: each gap (and who holds its image), each node's line and its gaps, the nodes not ready, the summary. */
function textReport(c: Closure): string[] {
  const lines: string[] = [];
  for (const g of c.gaps) {
    lines.push(`${g.why}: ${g.image}: ${g.message}; asked for by ${g.users.join(', ')}`);
    lines.push(`  severity ${g.severity ?? 'high'}${g.held ? `: ${g.held}` : ''}`);
  }
  for (const r of c.perNode) lines.push(nodeLine(r));
  for (const g of c.nodeGaps)
    lines.push(
      `node ${g.node}: ${g.state === 'missing' ? 'MissingOnReady' : 'UnpinnedOnReady'} (severity ${g.severity}): ${g.message}`,
    );
  if (!c.rollup.ready) lines.push(`nodes: ${c.rollup.summary}: ${nextSteps(c.rollup)}`);
  lines.push(c.summary);
  return lines;
}

interface CheckDeps {
  apis(o: object): Promise<AdminApis>;
  loadBundle(file: string, o: object, withFileDigest: boolean): Promise<AdminBundle>;
  kubeOptions(cmd: Command): Command;
  trustOptions(cmd: Command): Command;
  escape(s: string): string;
}

export function addCheckCommand(cluster: Command, d: CheckDeps): void {
  d.trustOptions(
    d.kubeOptions(
      cluster
        .command('check')
        .description(
          'The registry-free closure: every image the cluster asks for (every Pod, every Deployment, DaemonSet, StatefulSet, ReplicaSet, Job and CronJob template, every operator\'s relatedImages) must be in one of the bundles under the name it is asked by, and not pulled with imagePullPolicy Always; and every node must be ready for the first bundle (as "status"). Names each gap, why and who asks for it, which nodes hold its image anyway (from what each agent publishes of its runtime) and its severity (high, medium: unpinned somewhere, the image GC may take it; low: held pinned by every node); per node, what it holds of those images and what it lacks and why, and any image of its bundle it lacks or does not pin while it says Ready. Exit 0 only when there is no gap.',
        )
        .argument(
          '<bundle...>',
          'the bundle the cluster upgrades with first, then any others the nodes loaded (a workload bundle, say)',
        ),
    ),
  ).action(async (files: string[], o: { json?: boolean }) => {
    const bundles = await Promise.all(files.map((f, i) => d.loadBundle(f, o, i === 0)));
    const c = await checkClosure(await d.apis(o), bundles);
    if (o.json) {
      const out = {
        complete: c.complete,
        severity: c.severity ?? null,
        summary: c.summary,
        needed: c.needed,
        gaps: c.gaps,
        nodeGaps: c.nodeGaps,
        perNode: c.perNode,
        nodes: c.rollup.rows.filter((r) => !r.ready),
      };
      process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    } else
      process.stdout.write(
        textReport(c)
          .map((l) => `${d.escape(l)}\n`)
          .join(''),
      );
    if (!c.complete) {
      const what = [
        ...(c.gaps.length || !c.nodeGaps.length
          ? [`${c.gaps.length} image gap${c.gaps.length === 1 ? '' : 's'}`]
          : []),
        ...(c.nodeGaps.length
          ? [
              `${c.nodeGaps.length} image${c.nodeGaps.length === 1 ? '' : 's'} missing or unpinned on nodes that say Ready`,
            ]
          : []),
      ].join(' and ');
      throw Object.assign(
        new ClusterError(
          'CLOSURE_INCOMPLETE',
          `${what}${c.rollup.ready ? '' : ' and nodes not ready'}${c.severity ? ` (worst: ${c.severity})` : ''}: the upgrade would pull from a registry that is not there`,
        ),
        { reported: o.json === true },
      );
    }
  });
}
