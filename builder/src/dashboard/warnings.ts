/**
 * The warnings the page shows above the rows: those of `bundle cluster status` (nodes not Ready
 * for the bundle, Nodes not Ready) always, and, when the admin names the bundle file, every
 * one `bundle cluster prepare` gives, from prepareCluster itself in dry-run (nothing applied):
 * pull policies Always, missing release signatures, autoscalers, the version graph.
 */
import { nextSteps, prepareCluster, type AdminBundle } from '@offline-bundle/cluster';
import { ClusterError, type AdminApis } from '@offline-bundle/kube';
import type { DashboardRow, DashboardWarning, Target } from './snapshot.js';

/** Codes that mean the API could not be read or refused a read (prepare's could not run), not a finding. */
const CONTACT_CODES = new Set([
  'UNREACHABLE',
  'API_TIMEOUT',
  'API_ERROR',
  'API_TOO_LARGE',
  'API_REDIRECT',
  'API_NOT_JSON',
  'FORBIDDEN',
]);
const isContactError = (err: unknown): boolean =>
  err instanceof ClusterError && CONTACT_CODES.has(err.code);

/**
 * A refusal's code named as the page names every finding (PullAlways, NodesNotReady):
 * NO_RELEASE_SIGNATURES is shown as NoReleaseSignatures. Only the page's word: the CLIs'
 * "error: CODE" and --json keep the code.
 */
export const findingKind = (code: string): string =>
  code.toLowerCase().replace(/(?:^|_)([a-z0-9])/g, (_m, c: string) => c.toUpperCase());

/** What `bundle cluster status` reports as not ready, as warnings. */
export function statusWarnings(rows: readonly DashboardRow[], target: Target): DashboardWarning[] {
  const out: DashboardWarning[] = [];
  if (!target.ready)
    out.push({
      kind: 'NodesNotReady',
      object: 'NodeBundleStatus',
      message: `${target.summary}: ${nextSteps({ rows })}`,
    });
  for (const r of rows)
    if (!r.nodeReady)
      out.push({
        kind: 'NodeNotReady',
        object: `Node/${r.node}`,
        message: 'the Node is not Ready: the upgrade waits for it',
      });
  return out;
}

/**
 * prepare's warnings for `b`, read-only (dryRun). Its refusals (not OpenShift, not an upgrade
 * source, no signatures) are findings too; an API failure is thrown: the feed shows it as a
 * warning of its own (prepare reads more than the rows need, so it is not a lost API).
 */
export async function prepareWarnings(
  apis: AdminApis,
  b: AdminBundle,
): Promise<DashboardWarning[]> {
  try {
    const r = await prepareCluster(apis, b, { dryRun: true });
    const out: DashboardWarning[] = r.warnings.map((w) => ({
      kind: w.kind,
      object: w.object,
      message: w.message,
    }));
    if (r.changed.length) {
      out.push({
        kind: 'MissingSignatures',
        object: `ConfigMap/${r.configMap.metadata.namespace}/${r.configMap.metadata.name}`,
        message: `lacks the release signatures ${r.changed.join(', ')}: run "bundle cluster prepare" with this bundle`,
      });
    }
    return out;
  } catch (err) {
    if (err instanceof ClusterError && !isContactError(err))
      return [
        {
          kind: findingKind(err.code),
          object: err.code.startsWith('NO_') ? 'bundle' : 'ClusterVersion/version',
          message: err.message,
        },
      ];
    throw err;
  }
}
