// tier: unit
// Unit test of the pull watchdog (preload.stallSeconds): a pull whose image moves no bytes is
// cancelled with STALLED, which pullAll retries and then reports with the attempts made; a pull
// whose bytes keep moving is left alone however long it takes. The clock is the test's own (each
// look advances it), so nothing here waits for real seconds. The real path, containerd pulling
// from the agent's registry, is test/agent/pull-stall.test.ts.
import t from 'tap';
import { RuntimeError, pullAll, watchStalls, type ImagePuller } from '@offline-bundle/runtime';
import { until } from '../helpers/until.js';

const REF = 'quay.io/acme/big@sha256:' + 'b'.repeat(64);

/** A runtime that answers only when told, or fails as CRI does when its call is cancelled. */
function heldRuntime() {
  let calls = 0;
  let release: ((v: string) => void) | undefined;
  const puller: ImagePuller = {
    pullImage(_ref, opts = {}) {
      calls++;
      return new Promise((resolve, reject) => {
        release = resolve;
        opts.signal?.addEventListener(
          'abort',
          () => reject(new RuntimeError('PULL_FAILED', 'pull: cancelled')),
          { once: true },
        );
      });
    },
  };
  return { puller, calls: () => calls, answer: (v: string) => release?.(v) };
}

/** A clock that moves 100 ms each time it is read. */
function tickingClock() {
  let now = 0;
  return { now: () => (now += 100), peek: () => now };
}

t.test(
  'no byte of the image moves: the pull is cancelled with STALLED naming the image and the setting',
  async (t) => {
    const rt = heldRuntime();
    const clock = tickingClock();
    const watched = watchStalls(rt.puller, {
      stallMs: 2_000,
      lastMoved: () => undefined,
      checkMs: 5,
      now: clock.now,
    });
    const err = await watched.pullImage(REF).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof RuntimeError);
    t.equal((err as RuntimeError).code, 'STALLED', 'not the runtime\'s own "cancelled"');
    t.match(
      (err as RuntimeError).message,
      `pull ${REF}: no bytes moved for 2 s (preload.stallSeconds)`,
    );
  },
);

t.test('bytes keep moving: the pull is left alone until the runtime answers', async (t) => {
  const rt = heldRuntime();
  const clock = tickingClock();
  let looks = 0;
  // every look finds a byte moved just now, while the clock runs far past stallMs
  const watched = watchStalls(rt.puller, {
    stallMs: 1_000,
    lastMoved: () => {
      looks++;
      return clock.peek();
    },
    checkMs: 5,
    now: clock.now,
  });
  const pulling = watched.pullImage(REF);
  await until('50 looks', () => looks >= 50, { stepMs: 5 });
  t.ok(clock.peek() > 5_000, 'the clock ran well past the stall time');
  rt.answer('sha256:image');
  t.equal(await pulling, 'sha256:image');
  t.equal(rt.calls(), 1, 'never cancelled nor retried');
});

t.test(
  'through pullAll: a stalled pull is retried, then fails with STALLED and the attempts made',
  async (t) => {
    const rt = heldRuntime();
    const clock = tickingClock();
    const watched = watchStalls(rt.puller, {
      stallMs: 1_000,
      lastMoved: async () => undefined,
      checkMs: 5,
      now: clock.now,
    });
    const retried: number[] = [];
    const err = await pullAll(watched, [REF], {
      retries: 2,
      backoffMs: 0,
      onRetry: (_r, attempt, e) => {
        retried.push(attempt);
        t.equal(e.code, 'STALLED');
      },
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.equal((err as RuntimeError).code, 'STALLED');
    t.match(
      (err as RuntimeError).message,
      /^1 of 1 images failed to pull; first: pull quay\.io\/acme\/big@\S+: no bytes moved .* \(3 attempts\)$/,
    );
    t.same(retried, [1, 2]);
    t.equal(rt.calls(), 3, 'each attempt a new call to the runtime');
  },
);

t.test("stopped from outside: the caller's reason, not a stall", async (t) => {
  const rt = heldRuntime();
  const stop = new AbortController();
  const watched = watchStalls(rt.puller, {
    stallMs: 60_000,
    lastMoved: () => undefined,
    checkMs: 5,
  });
  const pulling = watched.pullImage(REF, { signal: stop.signal });
  stop.abort(new Error('SIGTERM'));
  const err = await pulling.then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal(
    (err as RuntimeError).code,
    'PULL_FAILED',
    "the runtime's cancel, as without the watchdog",
  );
  t.notMatch((err as Error).message, /no bytes moved/);
});
