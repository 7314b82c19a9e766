export {
  adminApis,
  APPLY_PATCH,
  customObjectsApi,
  isApiException,
  requestOptions,
  reviewApis,
} from './kube.js';
export { ClusterError } from './cluster-errors.js';
export {
  API_DEADLINE_MS,
  COMMAND_DEADLINE_MS,
  MAX_API_ERROR_BYTES,
  commandDeadline,
  messageStart,
} from './cluster-http.js';
export {
  MAX_LIST_KEPT_BYTES,
  apiCall,
  apiDetail,
  apiMessage,
  listAll,
  listAllAt,
} from './cluster-api.js';
export {
  MAX_WATCH_BYTES_PER_SECOND,
  MAX_WATCH_EVENT_BYTES,
  MAX_WATCH_EVENTS_PER_SECOND,
  WatchEventReader,
  watchCustomObjects,
} from './cluster-watch.js';
export type { WatchEvent } from './cluster-watch.js';
export type { AdminApis, ReviewApis } from './kube.js';
