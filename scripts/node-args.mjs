// Node flags each shipped app's launcher passes (scripts/package.mjs), in one place so the bench
// and the tests run our side with them too (bench/lib/ours.mjs, test/agent/fixtures.ts): a flag
// measured only by hand is not measured.
//
// bundle: `bundle create` reuses its buffers, so little young garbage is made, and V8 would still
// grow the young generation to 16 MiB semi-spaces: 2 MiB keeps the peak RSS down. The registry's
// sockets hand over a fresh buffer per read, and V8 counts those buffers against an old-generation
// limit that starts near the live heap (~17 MiB): it marked the whole heap about every 11 MiB
// downloaded (93 times per GiB, ~1.5 CPU-s). Starting that limit at 48 MiB: 16 per GiB, and the
// peak RSS of a 2 GiB build 223 MiB, 240 at 8 GiB (docs/benchmarks.md, 2026-12-07 17:00).
//
// bundle-agent: the same from peers, over TLS, on a live heap of ~55 MiB (the cluster client):
// 88 full marks per GiB received, 6.0 of the receiving node's 24.8 CPU-s per GiB. At 96 MiB: 8,
// 0.6 CPU-s, 17.4 in all; the agent's RSS after the fetch 204 MiB against 163
// (`node bench/peers-profile.mjs --nodes 1 --size 256M`, 2026-12-07 17:05).
export const NODE_ARGS = {
  bundle: ['--max-semi-space-size=2', '--initial-old-space-size=48'],
  'bundle-agent': ['--initial-old-space-size=96'],
};
