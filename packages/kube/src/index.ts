export { adminApis, APPLY_PATCH, customObjectsApi, isApiException, requestOptions, reviewApis } from './kube.js';
export { ClusterError } from './cluster-errors.js';
export { API_DEADLINE_MS, COMMAND_DEADLINE_MS, MAX_API_ERROR_BYTES, commandDeadline, messageStart } from './cluster-http.js';
export { MAX_LIST_KEPT_BYTES, apiCall, apiDetail, apiMessage, listAll } from './cluster-api.js';
export type { AdminApis, ReviewApis } from './kube.js';
