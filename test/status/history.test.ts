// tier: unit
// The version history across two successive bundles: the incoming release is appended and the
// outgoing one (what the cluster still runs) is kept until the incoming one is complete.
import t from 'tap';
import {
  HISTORY_LIMIT,
  emptyStatus,
  markComplete,
  markFailed,
  markLoaded,
  observeRunning,
  recordIncoming,
  runningReleases,
  StatusTracker,
  toResource,
  versionsInUse,
  type HistoryEntry,
} from '@offline-bundle/status';
import { compileSchema, crdSchema, DIGEST, fixedClock, loadCrd } from './lib.js';

const states = (h: HistoryEntry[]) => h.map((e) => `${e.version}:${e.state}`);
const at = (m: number) => new Date(Date.UTC(2026, 10, 21, 10, m));

t.test(
  'two successive bundles: the outgoing release stays until the incoming one is complete',
  async (t) => {
    const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
    const tracker = new StatusTracker(emptyStatus('worker-1'), fixedClock());
    const steps: [string, string[]][] = [];
    const step = (name: string, fn: (h: HistoryEntry[]) => HistoryEntry[]) => {
      tracker.update((s) => {
        s.history = fn(s.history);
      });
      const h = tracker.current.history;
      steps.push([name, states(h)]);
      const obj = toResource(tracker.current, 'worker-1');
      t.ok(validate(obj), `${name}: the resource validates ${JSON.stringify(validate.errors)}`);
      return h;
    };

    // First bundle: 4.14.38 runs, 4.15.1 comes in.
    step('start', (h) => observeRunning(h, '4.14.38', at(0)));
    step('4.15.1 plugged in', (h) =>
      recordIncoming(h, { version: '4.15.1' }, { running: '4.14.38', now: at(1) }),
    );
    let h = step('4.15.1 digest known', (h) =>
      recordIncoming(h, { version: '4.15.1', digest: DIGEST }, { now: at(2) }),
    );
    t.same(
      runningReleases(h).map((e) => e.version),
      ['4.14.38'],
      'while installing, 4.14.38 is still the running release',
    );
    h = step('4.15.1 loaded', (h) => markLoaded(h, '4.15.1', { now: at(3) }));
    t.same(
      states(h),
      ['4.14.38:running', '4.15.1:loaded'],
      'loaded is not complete: the outgoing release stays',
    );
    t.equal(h[1]!.digest, DIGEST, 'digest kept');
    t.same(versionsInUse(h), ['4.14.38', '4.15.1'], 'both must stay pinned');
    h = step('agent restarts, config still says 4.14.38', (h) =>
      observeRunning(h, '4.14.38', at(4)),
    );
    t.same(states(h), ['4.14.38:running', '4.15.1:loaded'], 'a restart changes nothing');
    h = step('cluster upgraded to 4.15.1', (h) => markComplete(h, '4.15.1', at(5)));
    t.same(states(h), ['4.15.1:complete'], 'only once 4.15.1 is complete is 4.14.38 dropped');

    // Second bundle: 4.15.1 runs, 4.15.2 comes in, its first attempt fails.
    h = step('4.15.2 plugged in', (h) =>
      recordIncoming(h, { version: '4.15.2' }, { running: '4.15.1', now: at(6) }),
    );
    t.same(states(h), ['4.15.1:complete', '4.15.2:installing'], 'the outgoing 4.15.1 is kept');
    h = step('4.15.2 fails', (h) => markFailed(h, '4.15.2', at(7)));
    t.same(states(h), ['4.15.1:complete', '4.15.2:failed']);
    t.same(versionsInUse(h), ['4.15.1']);
    h = step('4.15.2 again', (h) =>
      recordIncoming(h, { version: '4.15.2', digest: DIGEST }, { running: '4.15.1', now: at(8) }),
    );
    t.same(states(h), ['4.15.1:complete', '4.15.2:installing']);
    h = step('4.15.2 loaded', (h) => markLoaded(h, '4.15.2', { now: at(9) }));
    t.same(states(h), ['4.15.1:complete', '4.15.2:loaded']);
    t.same(
      runningReleases(h).map((e) => e.version),
      ['4.15.1'],
      '4.15.1 still the running release',
    );
    h = step('the agent learns the cluster runs 4.15.2', (h) =>
      observeRunning(h, '4.15.2', at(10)),
    );
    t.same(states(h), ['4.15.2:complete'], 'observeRunning on a loaded release completes it');
    t.equal(h[0]!.at, at(10).toISOString());
    t.ok(steps.length > 10);
  },
);

t.test('history edge cases', async (t) => {
  // Re-inserting the running release does not make it "installing".
  let h = observeRunning([], '4.14.38', at(0));
  h = recordIncoming(h, { version: '4.14.38', digest: DIGEST }, { running: '4.14.38', now: at(1) });
  t.same(states(h), ['4.14.38:running']);
  t.equal(h[0]!.digest, DIGEST);
  t.same(
    states(markLoaded(h, '4.14.38')),
    ['4.14.38:running'],
    'markLoaded leaves a running release alone',
  );
  t.same(states(markFailed(h, '4.14.38')), ['4.14.38:running'], 'markFailed too');

  // A load that never finished (crash) becomes failed when another bundle starts.
  h = recordIncoming(h, { version: '4.15.1' }, { running: '4.14.38', now: at(2) });
  h = recordIncoming(h, { version: '4.15.2' }, { running: '4.14.38', now: at(3) });
  t.same(states(h), ['4.14.38:running', '4.15.1:failed', '4.15.2:installing']);

  // The cluster was upgraded by other means: a new baseline replaces the stale one.
  t.same(states(observeRunning(h, '4.16.0', at(4))), [
    '4.15.1:failed',
    '4.15.2:installing',
    '4.16.0:running',
  ]);

  // Inputs are not modified.
  const before = JSON.stringify(h);
  markComplete(h, '4.15.2');
  recordIncoming(h, { version: '9' });
  t.equal(JSON.stringify(h), before, 'pure functions');

  // Bounded: failed attempts are pruned first; in-use entries never.
  let g = observeRunning([], '4.14.38', at(0));
  for (let i = 0; i < 30; i++) {
    g = recordIncoming(g, { version: `4.15.${i}` }, { running: '4.14.38', now: at(i + 1) });
    g = markFailed(g, `4.15.${i}`, at(i + 1));
  }
  t.equal(g.length, HISTORY_LIMIT);
  t.equal(g[0]!.version, '4.14.38', 'the running release survives pruning');
  t.equal(g.at(-1)!.version, '4.15.29', 'the newest attempt is kept');
});
