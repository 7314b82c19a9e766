/**
 * The admin's side of BundleApproval (packages/status approval.ts): the leave for nodes to fetch
 * one bundle from each other (issue #22). Only admins create or delete approvals
 * (deploy/admin-rbac.yaml); nodes read them (deploy/rbac.yaml).
 */
import {
  API_VERSION,
  APPROVAL_KIND,
  APPROVAL_LIMITS,
  APPROVAL_PLURAL,
  approvalName,
  GROUP,
  pickApproval,
  VERSION,
  type Approval,
  type ApprovalSpec,
} from '@offline-bundle/status';
import {
  apiCall,
  ClusterError,
  isApiException,
  listAll,
  type AdminApis,
} from '@offline-bundle/kube';

export function approvalObject(spec: ApprovalSpec): Record<string, unknown> {
  return {
    apiVersion: API_VERSION,
    kind: APPROVAL_KIND,
    metadata: {
      name: approvalName(spec.manifestDigest),
      labels: { 'app.kubernetes.io/part-of': 'offline-bundle' },
    },
    spec: {
      manifestDigest: spec.manifestDigest,
      version: spec.version.slice(0, APPROVAL_LIMITS.version),
      ...(spec.releaseName
        ? { releaseName: spec.releaseName.slice(0, APPROVAL_LIMITS.releaseName) }
        : {}),
      signer: spec.signer,
      checked: spec.checked,
      ...(spec.approvedAt ? { approvedAt: spec.approvedAt } : {}),
    },
  };
}

const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};

const CRD_FIX = 'install it: kubectl apply -f deploy/crd.yaml';
const what = (verb: string) => `${verb} ${APPROVAL_PLURAL}.${GROUP}`;

/** Every approval of the cluster, oldest first; none when the CRD is not installed. */
export async function listApprovals(apis: AdminApis): Promise<Approval[]> {
  const items = await listAll(
    what('list'),
    (q) =>
      apis.custom.listClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: APPROVAL_PLURAL,
        ...q,
      }),
    pickApproval,
    { notFound: () => [] },
  );
  return items
    .filter((a): a is Approval => a !== undefined)
    .sort(
      (a, b) => (a.created ?? '').localeCompare(b.created ?? '') || a.name.localeCompare(b.name),
    );
}

export interface ApproveResult {
  approval: Approval;
  created: boolean;
}

const sameSpec = (a: ApprovalSpec, b: ApprovalSpec) =>
  a.manifestDigest === b.manifestDigest && a.signer === b.signer && a.version === b.version;

/**
 * Creates the approval. An approval of the same digest already there with the same signer and
 * version is kept as it is (created false); one that differs is refused: approvals are not
 * edited, so that what a node once read stays what the admin approved.
 */
export async function approveBundle(apis: AdminApis, spec: ApprovalSpec): Promise<ApproveResult> {
  const body = approvalObject(spec);
  const name = approvalName(spec.manifestDigest);
  try {
    const made = await apis.custom.createClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: APPROVAL_PLURAL,
      body,
    });
    return { approval: pickApproval(obj(made)) ?? { name, ...spec }, created: true };
  } catch (err) {
    if (isApiException(err) && err.code === 404)
      throw new ClusterError(
        'NO_CRD',
        `the cluster has no ${APPROVAL_KIND} resource (${APPROVAL_PLURAL}.${GROUP}): ${CRD_FIX}`,
        { cause: err },
      );
    if (!isApiException(err) || err.code !== 409)
      return apiCall(what('create'), () => Promise.reject(err));
  }
  const cur = await apiCall(what('get'), () =>
    apis.custom.getClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: APPROVAL_PLURAL,
      name,
    }),
  );
  const existing = pickApproval(obj(cur));
  if (existing && sameSpec(existing, spec)) return { approval: existing, created: false };
  throw new ClusterError(
    'ALREADY_APPROVED',
    `${name} is already approved ${existing ? `for version ${existing.version} and signer ${existing.signer}` : 'with another spec'}: approvals are not edited; run "bundle cluster revoke ${spec.manifestDigest}" first, then approve again`,
  );
}

/** Deletes the approval of `manifestDigest`: nodes stop starting fetches of that bundle. */
export async function revokeApproval(apis: AdminApis, manifestDigest: string): Promise<void> {
  const name = approvalName(manifestDigest);
  try {
    await apis.custom.deleteClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: APPROVAL_PLURAL,
      name,
    });
  } catch (err) {
    if (isApiException(err) && err.code === 404) {
      throw new ClusterError(
        'NOT_APPROVED',
        `no approval of ${manifestDigest} in the cluster (nothing to revoke, or the CRD is not installed): "bundle cluster approvals" lists them`,
        { cause: err },
      );
    }
    await apiCall(what('delete'), () => Promise.reject(err));
  }
}
