import { BaseError } from '@offline-bundle/host';

/** Stable codes of the admin's cluster commands (`bundle cluster …`). */
type ClusterErrorCode =
  | 'KUBECONFIG' // the kubeconfig cannot be read or names no cluster
  | 'UNREACHABLE' // the API server did not answer
  | 'FORBIDDEN' // RBAC refused a request (401/403)
  | 'API_ERROR' // any other answer of the API server
  | 'API_TIMEOUT' // no complete answer within the call's deadline
  | 'API_TOO_LARGE' // an answer over MAX_API_RESPONSE_BYTES
  | 'API_REDIRECT' // a redirect to another server (or too many, or of a change)
  | 'API_NOT_JSON' // a 2xx answer that is not JSON, or not the shape asked for
  | 'API_GONE' // 410: a watch's resourceVersion is too old (list again)
  | 'API_TOO_FAST' // a watch sent past MAX_WATCH_EVENTS_PER_SECOND or MAX_WATCH_BYTES_PER_SECOND
  | 'NOT_OPENSHIFT' // no ClusterVersion: prepare/upgrade are for OpenShift clusters
  | 'NO_RELEASE_IMAGE' // the bundle carries no OpenShift release image
  | 'NO_RELEASE_SIGNATURES' // the bundle carries no release signature
  | 'NOT_AN_UPGRADE_SOURCE' // the running version is not among the bundle's accepted sources
  | 'NODES_NOT_READY' // not every node reports Ready for this bundle
  | 'CLOSURE_INCOMPLETE' // check: an image the cluster asks for is in no bundle or pulled Always, or a node is not ready
  | 'NOT_PREPARED' // the signature ConfigMap is missing or differs: run prepare
  | 'ADMIN_ACK_REQUIRED' // a hop of an update path waits on an admin-gates acknowledgement
  | 'INVALID_NODE_NAME' // a node name given is not a Kubernetes object name
  | 'INVALID_DIGEST' // a digest given is not sha256:<64 hex>
  | 'NO_CRD' // a resource of deploy/crd.yaml is not installed
  | 'ALREADY_APPROVED' // an approval of that digest exists with another version or signer
  | 'NOT_APPROVED' // revoke: no approval of that digest
  | 'APPROVAL_NEEDS_VERSION'; // approve by digest without --version (or with more or less than one --key)

export class ClusterError extends BaseError<ClusterErrorCode> {}
