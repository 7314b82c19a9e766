// tier: unit
// Unit test of pullAll's loop only (concurrency bound, retries with backoff, NO_SPACE stop,
// progress). The client here is a fake, CriImageClient-shaped object: the real PullImage
// path is covered against a real containerd in containerd.test.ts.
import t from 'tap';
import {
  RuntimeError,
  pullAll,
  type ImagePuller,
  type PullImageOptions,
} from '@offline-bundle/runtime';

type Behaviour = (ref: string, attempt: number, opts: PullImageOptions) => Promise<string>;

function fakeClient(behaviour: Behaviour) {
  const attempts = new Map<string, number>();
  const started: string[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const client: ImagePuller = {
    async pullImage(ref, opts = {}) {
      const attempt = attempts.get(ref) ?? 0;
      attempts.set(ref, attempt + 1);
      started.push(ref);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        return await behaviour(ref, attempt, opts);
      } finally {
        inFlight--;
      }
    },
  };
  return { client, attempts, started, maxInFlight: () => maxInFlight };
}

const delay = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(new RuntimeError('PULL_FAILED', 'cancelled'));
    });
  });

const refs = Array.from(
  { length: 8 },
  (_, i) => `quay.io/ns/img${i}@sha256:${String(i).repeat(64)}`,
);

t.test('bounded concurrency, progress per image, results in input order', async (t) => {
  const f = fakeClient(async (ref) => {
    await delay(5 + (ref.length % 7));
    return `id-of-${ref}`;
  });
  const progress: [number, number][] = [];
  const res = await pullAll(f.client, [...refs, refs[0] as string], {
    concurrency: 3,
    onProgress: (p) => progress.push([p.done, p.total]),
  });
  t.same(
    res,
    refs.map((ref) => ({ ref, imageRef: `id-of-${ref}` })),
  );
  t.equal(f.maxInFlight(), 3, 'never more than 3 pulls at once');
  t.same(
    progress,
    refs.map((_, i) => [i + 1, refs.length]),
    'done/total per finished image, duplicates once',
  );
});

t.test('transient failures are retried with backoff', async (t) => {
  const f = fakeClient(async (ref, attempt) => {
    if (ref === refs[1] && attempt < 2)
      throw new RuntimeError('RUNTIME_UNAVAILABLE', 'socket gone');
    if (ref === refs[2] && attempt < 1) throw new RuntimeError('TIMEOUT', 'slow');
    return 'ok';
  });
  const retries: [string, number, string][] = [];
  const t0 = Date.now();
  await pullAll(f.client, refs.slice(0, 4), {
    concurrency: 2,
    retries: 3,
    backoffMs: 40,
    onRetry: (r, n, e) => retries.push([r, n, e.code]),
  });
  t.equal(f.attempts.get(refs[1] as string), 3);
  t.equal(f.attempts.get(refs[2] as string), 2);
  t.same(
    retries.filter((r) => r[0] === refs[1]),
    [
      [refs[1], 1, 'RUNTIME_UNAVAILABLE'],
      [refs[1], 2, 'RUNTIME_UNAVAILABLE'],
    ],
  );
  t.ok(
    Date.now() - t0 >= 20 + 40 - 5,
    'backed off (jittered 40 ms then 80 ms, at least half of each)',
  );
});

t.test('permanent failures: others finish, then one error naming the count', async (t) => {
  const f = fakeClient(async (ref, attempt) => {
    if (ref === refs[0]) throw new RuntimeError('IMAGE_NOT_FOUND', `pull ${ref}: not found`);
    if (ref === refs[3])
      throw new RuntimeError('PULL_FAILED', `pull ${ref}: broken (attempt ${attempt})`);
    return 'ok';
  });
  const err = (await pullAll(f.client, refs, { concurrency: 2, retries: 2, backoffMs: 1 }).catch(
    (e: unknown) => e,
  )) as RuntimeError;
  t.ok(err instanceof RuntimeError);
  t.equal(err.code, 'IMAGE_NOT_FOUND', "the first failure's code");
  t.match(
    err.message,
    /^2 of 8 images failed to pull; first: pull quay\.io\/ns\/img0@.*not found \(and 1 more\)$/,
  );
  t.equal((err.cause as AggregateError).errors.length, 2);
  t.equal(f.attempts.get(refs[0] as string), 1, 'not-found is not retried');
  t.equal(f.attempts.get(refs[3] as string), 3, 'PULL_FAILED retried twice');
  t.same(new Set(f.started), new Set(refs), 'every other image was still pulled');
});

t.test('NO_SPACE stops at once: no new pulls, in-flight ones cancelled', async (t) => {
  const cancelled: string[] = [];
  const f = fakeClient(async (ref, _attempt, opts) => {
    if (ref === refs[1]) {
      await delay(10);
      throw new RuntimeError(
        'NO_SPACE',
        `pull ${ref}: write /var/lib/containers: no space left on device`,
      );
    }
    try {
      await delay(ref === refs[0] ? 5 : 2000, opts.signal);
    } catch (e) {
      cancelled.push(ref);
      throw e;
    }
    return 'ok';
  });
  const progress: string[] = [];
  const t0 = Date.now();
  await t.rejects(
    pullAll(f.client, refs, {
      concurrency: 3,
      retries: 5,
      backoffMs: 1,
      onProgress: (p) => progress.push(p.ref),
    }),
    {
      code: 'NO_SPACE',
      message: /no space left on device/,
    },
  );
  t.ok(Date.now() - t0 < 1000, 'did not wait for the slow in-flight pull');
  t.equal(f.attempts.get(refs[1] as string), 1, 'NO_SPACE is not retried');
  // 0 (fast), 1 (no space at 10 ms), 2 (slow); 0 finished at 5 ms, so 3 (slow) started.
  t.same(f.started, refs.slice(0, 4), `stopped early: 4 of ${refs.length} pulls started`);
  t.same(progress, [refs[0]], 'only the pull that finished first was reported');
  t.same(
    cancelled.sort(),
    [refs[2], refs[3]],
    'the in-flight pulls were cancelled through their signal',
  );
});

t.test('outer abort signal', async (t) => {
  const ac = new AbortController();
  const f = fakeClient(async (_ref, _a, opts) => {
    await delay(50, opts.signal);
    return 'ok';
  });
  setTimeout(() => ac.abort(), 10);
  await t.rejects(
    pullAll(f.client, refs, { concurrency: 2, signal: ac.signal }),
    { name: 'AbortError' },
    "rejects with the caller's abort reason",
  );
  t.equal(f.started.length, 2, 'no new pull starts after the abort');
  t.same(await pullAll(f.client, [], {}), [], 'nothing to pull');
});
