export {
  PHASES,
  CONDITION_TYPES,
  CONDITION_STATUSES,
  HISTORY_STATES,
  BUNDLE_MODES,
  emptyStatus,
} from './model.js';
export {
  writeStatusFile,
  readStatusFile,
  readStatusAndWriter,
  lastWordOf,
  StatusFileWriter,
} from './file.js';
export { processIdentity, pidExists, otherProcess, writerLiveness } from './liveness.js';
export { StatusTracker } from './tracker.js';
export { technicianLine, notRunningLine } from './summary.js';
export {
  DROP_DIRECTORY_MEDIA,
  KEPT_COPY_MEDIA,
  PEER_MEDIA,
  FAILURE_REASONS,
  FAILURE_SENTENCES,
  PART_COLLECTING_REASONS,
  SPOOLED_MEDIA,
  WAITING_SENTENCES,
  failureSentence,
  fileWords,
  fromSpool,
  onRemovableMedia,
} from './reasons.js';
export type { FailureReason } from './reasons.js';
export {
  readClusterVersion,
  readClusterRelease,
  readClusterVersionObject,
  readNodeMachineConfig,
  type NodeMachineConfig,
  clusterReadFailure,
  forbiddenMessage,
  completedRelease,
  RUNNING_VERSION_ROLE,
} from './cluster-version.js';
export {
  HISTORY_LIMIT,
  observeRunning,
  recordIncoming,
  markLoaded,
  markFailed,
  markComplete,
  markRunningLoaded,
  holdsRelease,
  runningReleases,
  versionsInUse,
} from './history.js';
export {
  GROUP,
  VERSION,
  API_VERSION,
  KIND,
  PLURAL,
  LIMITS,
  REQUIRED,
  PEER_PORT_MIN,
  PEER_PORT_MAX,
  isPeerPort,
  isValidNodeName,
  toResource,
  progressPercent,
  conditionReason,
  truncate,
} from './resource.js';
export {
  HOLDINGS_LIMITS,
  boundHoldings,
  heldKey,
  heldState,
  imageKey,
  runtimeHoldings,
} from './holdings.js';
export type { HeldState, ListedImage } from './holdings.js';
export { DEFAULT_HEARTBEAT_MS, ClusterReporter, fieldManagerFor } from './reporter.js';
export {
  APPROVAL_KIND,
  APPROVAL_LIMITS,
  APPROVAL_PLURAL,
  approvalName,
  pickApproval,
} from './approval.js';
export type { Approval, ApprovalSpec } from './approval.js';
export { withoutRefused, refusedFields, parseFieldPath } from './refused.js';
export { Metrics, METRICS_CONTENT_TYPE, escapeLabel } from './metrics.js';
export type { BuildInfo } from './metrics.js';
export { startStatusServer } from './http.js';
export {
  MetricsAuth,
  TtlCache,
  kubeReviews,
  MAX_REVIEW_CACHE_ENTRIES,
  MAX_TOKEN_BYTES,
  METRICS_ACCESS,
  REVIEW_CACHE_TTL_MS,
  REVIEW_DEADLINE_MS,
  REVIEW_DENIED_TTL_MS,
  UNKNOWN_CREDENTIAL_RATE,
} from './metrics-auth.js';
export { addressKey, METRICS_CONNECTION_LIMITS } from './metrics-connections.js';
export type { Identity, Reviews, Verdict } from './metrics-auth.js';
export {
  listenLogged,
  startMetricsListener,
  METRICS_PATH,
  MAX_METRICS_CONNECTIONS,
  MAX_METRICS_HEADER_BYTES,
  MAX_METRICS_IN_FLIGHT,
  METRICS_HANDSHAKE_TIMEOUT_MS,
  METRICS_REQUEST_TIMEOUT_MS,
  TLS_RELOAD_MS,
} from './metrics-listener.js';
export type { MetricsListener, MetricsListenerOptions, ServingTls } from './metrics-listener.js';
export {
  fileServingTls,
  keyMatches,
  readClientCa,
  selfSignedServingTls,
  siteOrSelfSigned,
  MAX_SERVING_PEM_BYTES,
  SELF_SIGNED_DIR,
} from './metrics-tls.js';
export { certificateIp, makeSelfSigned, RENEW_BEFORE_MS, SELF_SIGNED_DAYS } from './self-signed.js';
export { agentHealth, WRITE_PROBE_INTERVAL_MS } from './health.js';
export type { Health, HealthCheck } from './health.js';
export {
  ConsoleWriter,
  CONSOLE_FILE,
  AGETTY_RELOAD_FILE,
  OLD_CONSOLE_FILE,
  consoleFilePath,
  consoleText,
  reloadAgetty,
  removeOldConsoleFile,
} from './console.js';
export type {
  Phase,
  ConditionType,
  ConditionStatus,
  Condition,
  Progress,
  BundleIdentity,
  BundleMode,
  HistoryState,
  HistoryEntry,
  NodeStatus,
  ServingStatus,
  PeersStatus,
  PeerTransferStatus,
  PeerCopies,
  RuntimeHoldings,
} from './model.js';
export type { ReleaseRef } from './history.js';
export type { ClusterRelease, ClusterReadFailure } from './cluster-version.js';
export type { Reduced } from './refused.js';
export type { NodeBundleStatusResource, ResourceStatus, ResourceProgress } from './resource.js';
export type { ClusterReporterOptions, ReporterStats, StatusLogger } from './reporter.js';
export type { StatusServer, StatusServerOptions } from './http.js';
export type { ConsoleWriterOptions } from './console.js';
export type { StatusFile, StatusWriter, StatusFileWriterOptions } from './file.js';
export type { Liveness, ProcessIdentity, WriterRecord } from './liveness.js';
