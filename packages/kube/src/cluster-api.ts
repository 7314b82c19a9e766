import { ClusterError } from './cluster-errors.js';
import { isApiException } from './k8s.js';

/**
 * Runs one API request for `what` ("list nodes"), translating client-node's errors into
 * ClusterError codes at the boundary: 401/403 FORBIDDEN, anything unanswered UNREACHABLE, other
 * answers API_ERROR. `notFound` turns a 404 into a value (a kind the cluster does not have).
 */
export async function apiCall<T>(
  what: string,
  fn: () => Promise<T>,
  opts: { notFound?: () => T } = {},
): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isApiException(err)) {
      if (err.code === 404 && opts.notFound) return opts.notFound();
      const detail = apiMessage(err.body);
      if (err.code === 401 || err.code === 403) {
        throw new ClusterError(
          'FORBIDDEN',
          `the API server refused to ${what} (${err.code}${detail ? `: ${detail}` : ''}): bind your user to the offline-bundle-admin role (deploy/admin-rbac.yaml) or use a cluster-admin kubeconfig`,
          { cause: err },
        );
      }
      throw new ClusterError(
        'API_ERROR',
        `the API server answered ${err.code} to ${what}${detail ? `: ${detail}` : ''}`,
        { cause: err },
      );
    }
    if (err instanceof ClusterError) throw err;
    // client-node's deserializer recurses: an answer nested deep enough overflows the stack
    if (err instanceof RangeError || err instanceof SyntaxError)
      throw new ClusterError(
        'API_NOT_JSON',
        `the API server's answer to ${what} cannot be read (${apiDetail(err.message)}): is --kubeconfig's server an API server?`,
        { cause: err },
      );
    throw new ClusterError(
      'UNREACHABLE',
      `cannot ${what}: ${apiDetail(String((err as Error)?.message ?? err))}: check --kubeconfig and that the API server is reachable`,
      { cause: err },
    );
  }
}

/** Characters of a server's text quoted in one error line. */
const MAX_API_DETAIL_CHARS = 500;

/** Text from the API server (or about its answer) as part of one error line: one line, at most MAX_API_DETAIL_CHARS. */
export function apiDetail(text: string): string {
  const line = text
    .slice(0, 4 * MAX_API_DETAIL_CHARS)
    .replace(/\s*[\u0000-\u001f\u007f]+\s*/g, ' ')
    .trim();
  return line.length > MAX_API_DETAIL_CHARS ? `${line.slice(0, MAX_API_DETAIL_CHARS)}…` : line;
}

/** The API server's Status message of an error body, on one line, cut ('' when there is none). */
export function apiMessage(body: unknown): string {
  try {
    const b = typeof body === 'string' ? JSON.parse(body) : body;
    return typeof b?.message === 'string' ? apiDetail(b.message) : '';
  } catch {
    return '';
  }
}

/** Items asked for per page: each answer stays small whatever the cluster's size. */
const LIST_PAGE_ITEMS = 500;
/** Items kept from one list, over all its pages (Kubernetes' own limits: 5,000 nodes, 150,000 pods). */
const MAX_LIST_ITEMS = 200_000;
/** Pages of one list: a server may answer fewer items than asked, never endlessly few. */
const MAX_LIST_PAGES = 2 * Math.ceil(MAX_LIST_ITEMS / LIST_PAGE_ITEMS);
/**
 * What is kept of one list's items over all its pages, counted as the JSON of what `pick` keeps:
 * the item bound alone lets 200,000 items of 100 KB through (20 GB; 20,000 NodeBundleStatuses of
 * 70 KB took 2.3 GB). 150,000 pods cut to their containers' images keep some 50 MiB.
 */
export const MAX_LIST_KEPT_BYTES = 256 * 1024 * 1024;

type Page = {
  items?: unknown;
  metadata?: { _continue?: unknown; continue?: unknown; resourceVersion?: unknown };
};

/**
 * Every item of a list, a page of LIST_PAGE_ITEMS at a time, each reduced by `pick` to what the
 * caller reads (so a page's bytes are dropped before the next one comes). An answer that is not
 * a list is refused (API_NOT_JSON), one over MAX_LIST_ITEMS items too (API_TOO_LARGE).
 * `notFound`: as apiCall's, for a kind the cluster does not have.
 */
export async function listAll<T>(
  what: string,
  page: (q: { limit: number; _continue?: string }) => Promise<unknown>,
  pick: (item: Record<string, unknown>) => T,
  opts: { notFound?: () => T[] } = {},
): Promise<T[]> {
  return (await listAllAt(what, page, pick, opts)).items;
}

/**
 * listAll, with the list's resourceVersion (its first page's: the pages that follow are of the
 * same snapshot), from which a watch of the same kind goes on; '' when the server gave none.
 */
export async function listAllAt<T>(
  what: string,
  page: (q: { limit: number; _continue?: string }) => Promise<unknown>,
  pick: (item: Record<string, unknown>) => T,
  opts: { notFound?: () => T[] } = {},
): Promise<{ items: T[]; resourceVersion: string }> {
  const out: T[] = [];
  let resourceVersion: string | undefined;
  let kept = 0;
  let cont: string | undefined;
  let pages = 0;
  do {
    if (++pages > MAX_LIST_PAGES)
      throw new ClusterError(
        'API_TOO_LARGE',
        `the API server's answer to ${what} goes on past ${MAX_LIST_PAGES} pages: check --kubeconfig's server`,
      );
    const q = { limit: LIST_PAGE_ITEMS, ...(cont ? { _continue: cont } : {}) };
    const p = await apiCall<Page | undefined>(
      what,
      () => page(q) as Promise<Page>,
      opts.notFound ? { notFound: () => undefined } : {},
    );
    if (p === undefined) return { items: opts.notFound!(), resourceVersion: resourceVersion ?? '' };
    if (typeof p !== 'object' || p === null || !Array.isArray(p.items)) {
      throw new ClusterError(
        'API_NOT_JSON',
        `the API server's answer to ${what} is not a list (no "items"): is --kubeconfig's server an API server?`,
      );
    }
    for (const item of p.items as unknown[]) {
      if (typeof item !== 'object' || item === null)
        throw new ClusterError(
          'API_NOT_JSON',
          `the API server's answer to ${what} holds an item that is not an object`,
        );
      const picked = pick(item as Record<string, unknown>);
      kept += JSON.stringify(picked)?.length ?? 0;
      if (kept > MAX_LIST_KEPT_BYTES)
        throw new ClusterError(
          'API_TOO_LARGE',
          `the API server's answer to ${what} holds over ${MAX_LIST_KEPT_BYTES / 1024 / 1024} MiB in the fields read, past ${out.length} items: narrow it (--selector) or check --kubeconfig's server`,
        );
      out.push(picked);
    }
    if (out.length > MAX_LIST_ITEMS)
      throw new ClusterError(
        'API_TOO_LARGE',
        `the API server's answer to ${what} lists over ${MAX_LIST_ITEMS} items: narrow it (--selector) or check --kubeconfig's server`,
      );
    const rv = p.metadata?.resourceVersion;
    resourceVersion ??= typeof rv === 'string' ? rv : '';
    const next = p.metadata?._continue ?? p.metadata?.continue;
    cont = typeof next === 'string' && next !== '' ? next : undefined;
  } while (cont);
  return { items: out, resourceVersion: resourceVersion ?? '' };
}
