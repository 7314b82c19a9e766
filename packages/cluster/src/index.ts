export {
  rollup,
  readRollup,
  freshness,
  heartbeatSecondsOf,
  nextSteps,
  STALE_AFTER_BEATS,
} from './cluster-rollup.js';
export {
  SIGNATURE_NAMESPACE,
  SIGNATURE_CONFIGMAP,
  SIGNATURE_LABEL,
  signatureKey,
  signatureFieldManager,
  signatureConfigMap,
  applySignatureConfigMap,
  missingSignatureKeys,
} from './release-configmap.js';
export { nodeRbacObjects, AGENT_NAMESPACE } from './node-rbac.js';
export { approvalObject, approveBundle, listApprovals, revokeApproval } from './bundle-approval.js';
export {
  bundleImageNames,
  releaseImageByDigest,
  ocCommand,
  pullAlwaysWarnings,
  prepareCluster,
  upgradeCluster,
} from './cluster-upgrade.js';

export {
  GATE_KIND,
  GATE_NAME,
  GATE_PLURAL,
  GATE_WAIVER,
  gateLine,
  gateSpec,
  publishGate,
} from './upgrade-gate.js';

export { holdingsLine, MAX_LACKS_NAMED, nodeHoldings } from './node-holdings.js';
export type { NodeHoldings } from './node-holdings.js';
export type { NodeRow, Rollup, RowServing } from './cluster-rollup.js';
export type { GateResult, GateSpec } from './upgrade-gate.js';
export {
  applyPinnedImageSets,
  MAX_PINNED_PER_SET,
  pinnedSetName,
  pinnedSets,
  pinnedSetsLine,
  releaseLabel,
  releaseSeries,
} from './pinned-image-sets.js';
export type { PassedRelease, PinnedSetsResult, ReleaseSeries } from './pinned-image-sets.js';
export type { SignatureConfigMap } from './release-configmap.js';
export type { NodeIdentity } from './node-rbac.js';
export type { ApproveResult } from './bundle-approval.js';
export type { AdminBundle, Warning, PrepareResult, UpgradeResult } from './cluster-upgrade.js';
export { releasesOf, pathPosition, pathWords } from './release-path.js';
export type { PathRelease, PathPosition } from './release-path.js';
export { upgradePath, hopLine } from './upgrade-path.js';
export type { PathUpgradeResult, PlanStep, StepState } from './upgrade-path.js';
export { ADMIN_ACKS, ADMIN_GATES, acksNeeded, ocAck } from './admin-acks.js';
export { PAUSED_BY, ocPausePool, workerPools } from './machine-pools.js';
export { readPathStatus } from './path-status.js';
export type { PathReleaseState, PathReleaseStatus, PathStatus } from './path-status.js';
