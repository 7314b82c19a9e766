export {
  parseConfig,
  loadConfig,
  ConfigError,
  DEFAULT_CONFIG_PATH,
  MAX_CONFIG_FILE_BYTES,
} from './config.js';
export {
  loadBundle,
  runLoad,
  removeStalePartials,
  runningVersion,
  type StagedLayout,
} from './load/pipeline.js';
export { BundleQueue, runDaemon, statusTracker } from './daemon/daemon.js';
export { MediaWatcher, parseMountinfo } from './daemon/media.js';
export { checkPolicy, compareVersions } from './load/policy.js';
export {
  planSpace,
  planText,
  choosePlan,
  demands,
  imageGrowth,
  shortfall,
  SpaceRefused,
  STICK_WORDS,
  type SpaceCredit,
  type SpacePlan,
  type SpaceWords,
} from './load/space.js';
export type { EntrySource, SpaceCheck } from './load/entry-staging.js';
export { partialBytes, MAX_PARTIAL_ENTRIES } from './load/space-credit.js';
export { partialCredit } from './load/resume.js';
export {
  readKubeletThresholds,
  parseQuantity,
  parseThreshold,
  thresholdsOf,
  KUBELET_DEFAULTS,
  MAX_KUBELET_CONFIG_BYTES,
} from './load/kubelet-thresholds.js';
export { heldLayers, MAX_LAYERS_RECORD_BYTES } from './load/space-held.js';
export {
  collect,
  COLLECT_COMMAND_MS,
  COLLECT_DEADLINE_MS,
  COLLECT_JOURNAL_LINES,
  MAX_COLLECT_DIR_FILES,
  MAX_COLLECT_YAML_PARSE_BYTES,
} from './collect.js';
export { MAX_COLLECT_ENTRY_BYTES, MAX_COLLECT_TOTAL_BYTES } from './collect-archive.js';
export { REDACTED, redactDocument, redactText } from './collect-redact.js';
export {
  imageRefs,
  runtimeTarget,
  CrioTarget,
  ContainerdTarget,
} from './runtime/runtime-target.js';
export { AgentError, AGENT_REASONS, reasonOf } from './errors.js';
export { readReleases, recordRelease } from './state/release-records.js';
export { readBundleRecords, readForgotten, addForgotten } from './state/bundle-records.js';
export { watchCrioPins } from './runtime/crio-pins-watch.js';
export { StagingStore } from './load/staging-store.js';
export { loadImages } from './load/load-images.js';
export {
  checkMirrorUsed,
  checkPins,
  checkPinsSettled,
  imagesPresent,
} from './runtime/runtime-checks.js';
export {
  adoptRunningRelease,
  rememberClusterRelease,
  rememberedClusterRelease,
  CLUSTER_RELEASE_FILE,
} from './load/running-release.js';
export { createLogger } from './log.js';
export {
  ApiPeerDirectory,
  DIRECTORY_REQUEST_MS,
  selectPeers,
  type ApiPeerDirectoryOptions,
  type ServingClaim,
} from './peers/directory.js';
export {
  dropOutdatedDropIn,
  settleAgentSwitch,
  switchAgentIfNewer,
  renderImageDropIn,
  rollbackScript,
  DROP_IN_NAME,
} from './self-upgrade/self-upgrade.js';
export {
  readAgentSwitch,
  pendingMarker,
  agentSwitchPins,
  refsToKeepPinned,
  isAgentImageByDigest,
  isCanonicalReference,
} from './state/agent-switch-state.js';
export { forgetRelease, pruneReleases, unforgetRelease } from './releases/releases.js';
export type { AgentSwitchRecord } from './state/agent-switch-state.js';
export type { AgentConfig, RuntimeKind } from './config.js';
export type { PipelineContext, LoadResult, LoadStep } from './load/pipeline.js';
export type { RuntimeTarget, ImageInspector } from './runtime/runtime-target.js';
export type { PinReport } from './runtime/runtime-checks.js';
export type { AgentReason } from './errors.js';
export type { FoundBundle } from './daemon/media.js';
// bundles between nodes (issue #22): the transfer
export * from './peers/transfer.js';
// the daemon's peers and what they keep (issue #22)
export {
  startPeers,
  pausesServing,
  PEER_START_RETRY_MS,
  APPROVALS_GRACE_MS,
  FIRST_LOOK_WAIT_MS,
  type DaemonPeers,
  type PeerDaemon,
} from './daemon/peers.js';
export { removeLeftovers, showLoadedBefore } from './load/pipeline.js';
