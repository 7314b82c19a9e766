// Who may read the metrics, decided as kube-rbac-proxy (and the kubelet's own /metrics)
// decides: the caller is authenticated by a TokenReview of its bearer token, or by a client
// certificate from the configured CA (user CN, groups O), then authorised by a
// SubjectAccessReview for `get` on a resource of our own: nodebundlestatuses/metrics named after
// the node (so a grant opens this node's agents' metrics and no other /metrics in the cluster).
// Answers are kept a short while, so a Prometheus scraping every 30 s costs the API server two
// reviews a minute at most; credentials not seen before are reviewed at a bounded rate, and
// concurrent requests with the same unseen credentials share one review.
import { createHash } from 'node:crypto';
import { ClusterError, apiCall, reviewApis, type ReviewApis } from '@offline-bundle/kube';
import { ReviewRate, type RateLimits } from './review-rate.js';

/** How long an allowed token or access decision is reused. */
export const REVIEW_CACHE_TTL_MS = 60_000;
/** How long a refused one is: shorter, so a role bound a moment ago works soon. */
export const REVIEW_DENIED_TTL_MS = 10_000;
/** Tokens and identities remembered at most; the oldest goes first. */
export const MAX_REVIEW_CACHE_ENTRIES = 256;
/** A bearer token longer than this is refused unread (ServiceAccount tokens are 1-2 KiB). */
export const MAX_TOKEN_BYTES = 8 * 1024;
/** What "Bearer " and its spaces may add to MAX_TOKEN_BYTES in the Authorization header. */
const AUTH_SCHEME_SLACK_BYTES = 16;
/** One review's API request. */
export const REVIEW_DEADLINE_MS = 5_000;
/** One review's API response. */
const REVIEW_RESPONSE_MAX_BYTES = 256 * 1024;
/**
 * Requests whose credentials are not in the cache, and so cost a review: all sources together,
 * and per source address (an IPv6 /64 as one). Beyond, 429 at once and no review is asked for.
 */
export const UNKNOWN_CREDENTIAL_RATE: RateLimits = {
  perSecond: 5,
  burst: 10,
  perAddressPerSecond: 1,
  perAddressBurst: 3,
  maxAddresses: 1024,
};
/** Seconds a 429 asks the caller to wait. */
export const RATE_RETRY_AFTER_S = 1;
/** What the SubjectAccessReview asks for: get on the node's nodebundlestatuses/metrics. */
export const METRICS_ACCESS = {
  group: 'bundles.offline-bundle.io',
  resource: 'nodebundlestatuses',
  subresource: 'metrics',
  verb: 'get',
} as const;

export interface Identity {
  user: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

/** The two reviews against the API server. */
export interface Reviews {
  /** TokenReview: who the token is, undefined when the API server says it is no valid token. */
  authenticate(token: string): Promise<Identity | undefined>;
  /** SubjectAccessReview: whether `who` may get METRICS_ACCESS on this node. */
  allowed(who: Identity): Promise<boolean>;
}

export type Verdict =
  { code: 200; user: string } | { code: 401 | 403 | 429; user?: string; why: string };

export class TtlCache<T> {
  private readonly entries = new Map<string, { value: T; until: number }>();
  constructor(
    private readonly now: () => number,
    private readonly maxEntries = MAX_REVIEW_CACHE_ENTRIES,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: string): T | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > this.now()) return e.value;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: T, ttlMs: number): void {
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries)
      this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, until: this.now() + ttlMs });
  }
}

const hash = (s: string) => createHash('sha256').update(s).digest('hex');
const identityKey = (who: Identity) =>
  hash(JSON.stringify([who.user, who.uid ?? '', [...who.groups].sort(), who.extra ?? {}]));

const NO_CREDENTIALS = {
  code: 401,
  why: 'no credentials (a bearer token or a client certificate)',
} as const;
const UNKNOWN_TOKEN = {
  code: 401,
  why: 'the API server does not know the token (TokenReview: not authenticated)',
} as const;

/** The token of "Bearer TOKEN", or why the header is refused. */
function bearer(authorization: string | undefined): { token: string } | { code: 401; why: string } {
  if (!authorization) return NO_CREDENTIALS;
  if (authorization.length > MAX_TOKEN_BYTES + AUTH_SCHEME_SLACK_BYTES)
    return { code: 401, why: `Authorization header over ${MAX_TOKEN_BYTES} bytes` };
  const m = /^Bearer +([!-~]+)$/i.exec(authorization);
  return m ? { token: m[1]! } : { code: 401, why: 'Authorization is not "Bearer TOKEN"' };
}

/** Decides each request; an API server that cannot answer throws (the listener says 503, nothing is cached). */
export class MetricsAuth {
  private readonly tokens: TtlCache<Identity | null>;
  private readonly access: TtlCache<boolean>;
  private readonly rate: ReviewRate;
  /** Reviews under way by cache key: a second request with the same credentials waits for the first's answer. */
  private readonly pending = new Map<string, Promise<unknown>>();

  constructor(
    private readonly reviews: Reviews,
    now: () => number = Date.now,
    rate: RateLimits = UNKNOWN_CREDENTIAL_RATE,
  ) {
    this.tokens = new TtlCache(now);
    this.access = new TtlCache(now);
    this.rate = new ReviewRate(rate, now);
  }

  /** The verdict from the cache alone (no review, no rate): undefined when a review is needed. */
  cached(authorization: string | undefined, cert?: Identity): Verdict | undefined {
    let who: Identity | undefined = cert;
    if (!who) {
      const b = bearer(authorization);
      if ('code' in b) return b;
      const known = this.tokens.get(hash(b.token));
      if (known === undefined) return undefined;
      if (known === null) return UNKNOWN_TOKEN;
      who = known;
    }
    const ok = this.access.get(identityKey(who));
    return ok === undefined ? undefined : this.verdict(who, ok);
  }

  /** Whether a review for these credentials is under way (a request joining it needs no slot of its own). */
  underReview(authorization: string | undefined, cert?: Identity): boolean {
    if (cert) return this.pending.has(`a:${identityKey(cert)}`);
    const b = bearer(authorization);
    return !('code' in b) && this.pending.has(`t:${hash(b.token)}`);
  }

  /**
   * `authorization`: the request's Authorization header; `cert`: the identity of a verified client
   * certificate; `source`: the caller's address key, for the rate of reviews.
   */
  async check(
    authorization: string | undefined,
    cert: Identity | undefined,
    source: string,
  ): Promise<Verdict> {
    let charged = false;
    const mayReview = (key: string) => {
      if (charged || this.pending.has(key)) return true;
      charged = this.rate.take(source);
      return charged;
    };
    const limited = {
      code: 429,
      why: `credentials not seen before arrive faster than ${UNKNOWN_CREDENTIAL_RATE.perAddressPerSecond}/s from this address or ${UNKNOWN_CREDENTIAL_RATE.perSecond}/s in all`,
    } as const;
    let who = cert;
    if (!who) {
      const b = bearer(authorization);
      if ('code' in b) return b;
      const key = `t:${hash(b.token)}`;
      let known = this.tokens.get(key.slice(2));
      if (known === undefined) {
        if (!mayReview(key)) return limited;
        known = await this.once(key, async () => {
          const r = (await this.reviews.authenticate(b.token)) ?? null;
          this.tokens.set(key.slice(2), r, r ? REVIEW_CACHE_TTL_MS : REVIEW_DENIED_TTL_MS);
          return r;
        });
      }
      if (!known) return UNKNOWN_TOKEN;
      who = known;
    }
    const key = `a:${identityKey(who)}`;
    let ok = this.access.get(key.slice(2));
    if (ok === undefined) {
      if (!mayReview(key)) return limited;
      const asking = who;
      ok = await this.once(key, async () => {
        const r = await this.reviews.allowed(asking);
        this.access.set(key.slice(2), r, r ? REVIEW_CACHE_TTL_MS : REVIEW_DENIED_TTL_MS);
        return r;
      });
    }
    return this.verdict(who, ok);
  }

  private verdict(who: Identity, ok: boolean): Verdict {
    const a = METRICS_ACCESS;
    return ok
      ? { code: 200, user: who.user }
      : {
          code: 403,
          user: who.user,
          why: `${who.user} may not ${a.verb} ${a.resource}/${a.subresource} in ${a.group} (deploy/metrics.yaml: ClusterRole offline-bundle:metrics-reader, bound to it)`,
        };
  }

  private once<T>(key: string, review: () => Promise<T>): Promise<T> {
    const under = this.pending.get(key) as Promise<T> | undefined;
    if (under) return under;
    const p = review().finally(() => this.pending.delete(key));
    this.pending.set(key, p);
    return p;
  }
}

/**
 * The reviews through the API server, as the identity of `kubeconfig` (the node's: the Node
 * authorizer lets nodes create both; another identity needs deploy/metrics.yaml's
 * offline-bundle:metrics-auth-delegator bound to it), for the metrics of `node`. A failed call
 * drops the client, so a rotated kubelet certificate is read again.
 */
export function kubeReviews(kubeconfig: string, node: string): Reviews {
  let apis: ReviewApis | undefined;
  const call = async <T>(what: string, fn: (a: ReviewApis) => Promise<T>): Promise<T> => {
    try {
      apis ??= await reviewApis(kubeconfig, {
        deadlineMs: REVIEW_DEADLINE_MS,
        maxBytes: REVIEW_RESPONSE_MAX_BYTES,
      });
      return await apiCall(what, () => fn(apis!));
    } catch (err) {
      apis = undefined;
      if (err instanceof ClusterError && err.code === 'FORBIDDEN') {
        throw new ClusterError(
          'FORBIDDEN',
          `${err.message.replace(/: bind your user.*$/, '')}: review as the node (its kubelet kubeconfig), or bind ClusterRole offline-bundle:metrics-auth-delegator (deploy/metrics.yaml) to this identity`,
          { cause: err },
        );
      }
      throw err;
    }
  };
  return {
    authenticate: (token) =>
      call('create a TokenReview', async (a) => {
        const r = await a.authn.createTokenReview({
          body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
        });
        const u = r.status?.user;
        if (!r.status?.authenticated || !u?.username) return undefined;
        return {
          user: u.username,
          groups: u.groups ?? [],
          ...(u.uid ? { uid: u.uid } : {}),
          ...(u.extra ? { extra: u.extra } : {}),
        };
      }),
    allowed: (who) =>
      call('create a SubjectAccessReview', async (a) => {
        const r = await a.authz.createSubjectAccessReview({
          body: {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SubjectAccessReview',
            spec: {
              user: who.user,
              groups: who.groups,
              ...(who.uid ? { uid: who.uid } : {}),
              ...(who.extra ? { extra: who.extra } : {}),
              resourceAttributes: { ...METRICS_ACCESS, name: node },
            },
          },
        });
        return r.status?.allowed === true && r.status.denied !== true;
      }),
  };
}
