// tier: unit
// The metrics listener's decisions without a socket (packages/status metrics-auth.ts,
// review-rate.ts, metrics-connections.ts addressKey): the cache drops its oldest entry at
// MAX_REVIEW_CACHE_ENTRIES; unseen credentials cost a review only within the rate, per source
// and in all; an answer in the cache is given with no review and no rate; the SubjectAccessReview
// asks about the node's own nodebundlestatuses/metrics.
import t from 'tap';
import {
  addressKey,
  MAX_REVIEW_CACHE_ENTRIES,
  METRICS_ACCESS,
  MetricsAuth,
  TtlCache,
  UNKNOWN_CREDENTIAL_RATE,
  type Identity,
  type Reviews,
} from '@offline-bundle/status';

t.test('the review cache holds MAX_REVIEW_CACHE_ENTRIES, the oldest going first', async (t) => {
  const c = new TtlCache<number>(() => 0);
  for (let i = 0; i <= MAX_REVIEW_CACHE_ENTRIES; i++) c.set(`k${i}`, i, 1000);
  t.equal(c.size, MAX_REVIEW_CACHE_ENTRIES);
  t.equal(c.get('k0'), undefined, 'the oldest dropped');
  t.equal(c.get('k1'), 1);
  t.equal(c.get(`k${MAX_REVIEW_CACHE_ENTRIES}`), MAX_REVIEW_CACHE_ENTRIES);
});

t.test(
  'unseen tokens: reviewed within the rate per address and in all, 429 beyond; refilled with time; a cached answer needs neither',
  async (t) => {
    let now = 0;
    let reviews = 0;
    const r: Reviews = {
      authenticate: async (token) => {
        reviews++;
        return token === 'good' ? { user: 'p', groups: [] } : undefined;
      },
      allowed: async (who: Identity) => who.user === 'p',
    };
    const auth = new MetricsAuth(r, () => now);
    const rate = UNKNOWN_CREDENTIAL_RATE;
    const codes: number[] = [];
    for (let i = 0; i < rate.perAddressBurst + 2; i++)
      codes.push((await auth.check(`Bearer made-up-${i}`, undefined, '10.0.0.1')).code);
    t.strictSame(
      codes,
      [...Array(rate.perAddressBurst).fill(401), 429, 429],
      `${rate.perAddressBurst} from one address, then 429`,
    );
    t.equal(reviews, rate.perAddressBurst);
    let all = 0;
    for (let a = 2; a < 2 + rate.burst; a++)
      if ((await auth.check(`Bearer x-${a}`, undefined, `10.0.0.${a}`)).code === 401) all++;
    t.equal(
      all,
      rate.burst - rate.perAddressBurst,
      'all addresses together hold to the global burst',
    );
    t.equal(
      (await auth.check('Bearer good', undefined, '10.0.1.1')).code,
      429,
      'even a good token waits when the rate is spent',
    );
    now += 1000;
    t.equal(
      (await auth.check('Bearer good', undefined, '10.0.1.1')).code,
      200,
      'a second later: reviewed',
    );
    const before = reviews;
    t.strictSame(
      auth.cached('Bearer good'),
      { code: 200, user: 'p' },
      'then answered from the cache',
    );
    t.strictSame(
      auth.cached('Bearer made-up-0'),
      { code: 401, why: 'the API server does not know the token (TokenReview: not authenticated)' },
      'a refusal too',
    );
    t.equal(auth.cached('Bearer never-seen'), undefined, 'an unseen one needs a review');
    t.equal(reviews, before);
  },
);

t.test(
  "the access asked about is the node's nodebundlestatuses/metrics; addresses keyed as the peer port keys them",
  async (t) => {
    t.strictSame(METRICS_ACCESS, {
      group: 'bundles.offline-bundle.io',
      resource: 'nodebundlestatuses',
      subresource: 'metrics',
      verb: 'get',
    });
    t.equal(addressKey('::ffff:10.0.0.5'), '10.0.0.5');
    t.equal(addressKey('fd00:1:2:3:4:5:6:7'), 'fd00:1:2:3::/64');
    t.equal(addressKey('fd00:1:2:3::9'), 'fd00:1:2:3::/64', 'one /64 is one address');
  },
);
