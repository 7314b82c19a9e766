import { ClusterError } from './cluster-errors.js';
import { isApiException } from './kube.js';

/**
 * Runs one API request for `what` ("list nodes"), translating client-node's errors into
 * ClusterError codes at the boundary: 401/403 FORBIDDEN, anything unanswered UNREACHABLE, other
 * answers API_ERROR. `notFound` turns a 404 into a value (a kind the cluster does not have).
 */
export async function apiCall<T>(what: string, fn: () => Promise<T>, opts: { notFound?: () => T } = {}): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isApiException(err)) {
      if (err.code === 404 && opts.notFound) return opts.notFound();
      const detail = apiMessage(err.body);
      if (err.code === 401 || err.code === 403) {
        throw new ClusterError('FORBIDDEN', `the API server refused to ${what} (${err.code}${detail ? `: ${detail}` : ''}): bind your user to the offline-bundle-admin role (deploy/admin-rbac.yaml) or use a cluster-admin kubeconfig`, { cause: err });
      }
      throw new ClusterError('API_ERROR', `the API server answered ${err.code} to ${what}${detail ? `: ${detail}` : ''}`, { cause: err });
    }
    if (err instanceof ClusterError) throw err;
    throw new ClusterError('UNREACHABLE', `cannot ${what}: ${(err as Error).message}: check --kubeconfig and that the API server is reachable`, { cause: err });
  }
}

/** The API server's Status message of an error body, on one line ('' when there is none). */
export function apiMessage(body: unknown): string {
  try {
    const b = typeof body === 'string' ? JSON.parse(body) : body;
    return typeof b?.message === 'string' ? b.message.replace(/\s*\n\s*/g, ' ') : '';
  } catch {
    return '';
  }
}
