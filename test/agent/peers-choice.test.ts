// tier: unit
// Which peer sends which blob (agent/src/peers/peer-choice.ts), driven with a fixed sequence in
// place of Math.random: nodes fetching together begin at different places in the blob list,
// blobs few peers hold are asked for first, and a complete peer (the stick node) or one that
// said it was busy is drawn less often than a node still fetching that holds the blob too.
import t from 'tap';
import {
  BUSY_MEMORY_MS,
  BUSY_WEIGHT,
  COMPLETE_WEIGHT,
  rarestFirst,
  rotated,
  weightedPick,
  type Holder,
} from '@offline-bundle/agent';

/** How often each of `peers` is drawn over `n` evenly spread values of the random source. */
function draws<P extends Holder & { name: string }>(
  peers: P[],
  n: number,
  now = 100_000,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const p = weightedPick(peers, now, () => (i + 0.5) / n);
    out[p!.name] = (out[p!.name] ?? 0) + 1;
  }
  return out;
}

t.test('rotated: every item once, starting where the random source says', async (t) => {
  const items = ['a', 'b', 'c', 'd', 'e'];
  t.same(
    rotated(items, () => 0),
    items,
  );
  t.same(
    rotated(items, () => 0.5),
    ['c', 'd', 'e', 'a', 'b'],
  );
  t.same(
    rotated(items, () => 0.999999),
    ['e', 'a', 'b', 'c', 'd'],
  );
  t.same(
    rotated([], () => 0.7),
    [],
  );
  const starts = new Set([0, 0.2, 0.4, 0.6, 0.8].map((r) => rotated(items, () => r)[0]));
  t.equal(starts.size, 5, 'five fetchers spread evenly start at five different blobs');
});

t.test("rarestFirst: fewest holders first, the list's own order among equals", async (t) => {
  const holders: Record<string, number> = { a: 2, b: 1, c: 2, d: 0, e: 1 };
  t.same(
    rarestFirst(['a', 'b', 'c', 'd', 'e'], (j) => holders[j]!),
    ['d', 'b', 'e', 'a', 'c'],
  );
});

t.test(
  'weightedPick: a node still fetching is drawn over the complete stick node; a busy one less; alone, anyone is taken',
  async (t) => {
    const stick = { name: 'stick', have: undefined, busyAt: 0 };
    const fetching = { name: 'fetching', have: new Set(['x']), busyAt: 0 };
    const n = 900;
    const d = draws([stick, fetching], n);
    t.equal(
      d.stick,
      Math.round((n * COMPLETE_WEIGHT) / (1 + COMPLETE_WEIGHT)),
      `the stick node drawn in proportion ${COMPLETE_WEIGHT}:1`,
    );
    t.equal((d.stick ?? 0) + (d.fetching ?? 0), n);
    const twoComplete = draws([stick, { name: 'kept', have: undefined, busyAt: 0 }], n);
    t.same(twoComplete, { stick: n / 2, kept: n / 2 }, 'complete peers alone are drawn alike');
    const busy = draws(
      [
        { ...fetching, name: 'busy', busyAt: 100_000 - 1000 },
        { ...fetching, name: 'free' },
      ],
      n,
    );
    t.equal(
      busy.busy,
      Math.round((n * BUSY_WEIGHT) / (1 + BUSY_WEIGHT)),
      'a peer that answered 503 lately is drawn less',
    );
    const forgotten = draws(
      [
        { ...fetching, name: 'busy', busyAt: 100_000 - BUSY_MEMORY_MS - 1 },
        { ...fetching, name: 'free' },
      ],
      n,
    );
    t.same(forgotten, { busy: n / 2, free: n / 2 }, 'a 503 long ago no longer counts');
    t.equal(
      weightedPick([stick], 0, () => 0.99),
      stick,
      'the only holder is taken, complete or not',
    );
    t.equal(
      weightedPick([], 0, () => 0.5),
      undefined,
    );
  },
);
