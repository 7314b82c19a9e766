// `bundle cluster status` against the stand-in API server (contract test: test/cluster/apiserver.ts):
// every Node listed, a node missing, Failed, Ready for another digest, a selector, RBAC denial, no server.
import t from 'tap';
import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { errorCode, bundle } from '../builder/lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import {
  ART_REPO,
  RELEASE_REPO,
  clusterFixture,
  clusterVersion,
  makeBundle,
  nodeStatus,
  node,
} from './lib.js';

const { work, api, kubeconfig, key, keyring, b, trust, cluster, allReady } =
  await clusterFixture(t);
const cm = 'openshift-config-managed/mirrored-release-signatures';
void [
  api,
  b,
  trust,
  clusterVersion,
  path,
  writeFile,
  bundle,
  releaseKey,
  signRelease,
  ART_REPO,
  RELEASE_REPO,
  makeBundle,
  nodeStatus,
  node,
  work,
  kubeconfig,
  key,
  keyring,
  cm,
];

t.test('status', async (t) => {
  allReady();
  t.test('every node Ready for the same digest: exit 0', async (t) => {
    const r = await cluster(['status', '--json']);
    t.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    t.equal(j.ready, true);
    t.equal(j.digest, b.fileDigest);
    const at = (n: string) => api.statuses.find((s) => s.metadata.name === n)!.status.updatedAt;
    t.same(
      j.nodes.map(
        (n: { node: string; phase: string; pinned: string; heartbeat: string; stale: boolean }) => [
          n.node,
          n.phase,
          n.pinned,
          n.heartbeat,
          n.stale,
        ],
      ),
      [
        ['master-0', 'Ready', 'True', at('master-0'), false],
        ['worker-0', 'Ready', 'True', at('worker-0'), false],
        ['worker-1', 'Ready', 'True', at('worker-1'), false],
      ],
    );
    const text = await cluster(['status']);
    t.equal(text.code, 0);
    t.match(text.stdout, /^NODE\s+NODE READY\s+PHASE\s+VERSION\s+DIGEST\s+PINNED\s+LAST HEARTBEAT/);
    t.match(text.stdout, `3 of 3 nodes Ready for bundle ${b.fileDigest}`);
  });
  t.test('a node that never reported shows up (from the Node list): exit 1', async (t) => {
    allReady();
    api.put('nodes', node('worker-2'));
    const r = await cluster(['status', '--json']);
    t.equal(r.code, 1);
    const j = JSON.parse(r.stdout);
    t.equal(j.ready, false, 'one JSON document, ready false');
    t.match(
      j.nodes.find((n: { node: string }) => n.node === 'worker-2'),
      { phase: 'NotReported', ready: false },
    );
    t.match(j.summary, /3 of 4 nodes Ready .*worker-2 never reported/);
    t.equal(errorCode(r.stderr), 'NODES_NOT_READY');
    const sel = await cluster(['status', '-l', 'node-role.kubernetes.io/master']);
    t.equal(sel.code, 0, `a selector leaving it out: exit 0 (${sel.stderr})`);
  });
  t.test('a node Failed', async (t) => {
    allReady();
    api.put(
      'nodebundlestatuses',
      nodeStatus('worker-0', 'Failed', b.fileDigest, b.version, { reason: 'PullFailed' }),
    );
    const r = await cluster(['status']);
    t.equal(r.code, 1);
    t.match(r.stdout, /worker-0\s+True\s+Failed \(PullFailed\)/);
    t.match(
      r.stderr,
      /bundle: NODES_NOT_READY: 2 of 3 nodes Ready .*worker-0 Failed \(PullFailed\): plug the stick into worker-0, then run this again/,
    );
  });
  t.test(
    'a node whose own setup refused the bundle: no stick is asked for (#40 item 8)',
    async (t) => {
      allReady();
      api.put(
        'nodebundlestatuses',
        nodeStatus('worker-0', 'Failed', b.fileDigest, b.version, { reason: 'UntrustedKey' }),
      );
      api.put(
        'nodebundlestatuses',
        nodeStatus('worker-1', 'Failed', b.fileDigest, b.version, { reason: 'PullFailed' }),
      );
      const r = await cluster(['status']);
      t.equal(r.code, 1);
      t.match(
        r.stderr,
        /plug the stick into worker-1; fix the agent's setup on worker-0 \(UntrustedKey: "bundle-agent status" there says what; a stick does not help until then\)/,
      );
      t.notMatch(r.stderr, /plug the stick into [^;]*worker-0/);
      t.equal(
        `${r.stdout}${r.stderr}`.split('nodes Ready for bundle').length - 1,
        1,
        `the summary is said once: ${r.stdout}${r.stderr}`,
      );
    },
  );
  t.test('a node Ready for another bundle (wrong digest)', async (t) => {
    allReady();
    const other = 'sha256:' + 'ee'.repeat(32);
    api.put('nodebundlestatuses', nodeStatus('worker-1', 'Ready', other, '4.15.0'));
    const r = await cluster(['status', '--json', '--bundle-digest', b.fileDigest]);
    t.equal(r.code, 1);
    t.match(JSON.parse(r.stdout).summary, `worker-1 Ready for ${other} (4.15.0), not this one`);
  });
  t.test(
    'a Node the kubelet reports NotReady is not ready, whatever its agent last said: exit 1, and upgrade refuses',
    async (t) => {
      allReady();
      api.put('nodes', {
        ...node('worker-1'),
        status: {
          conditions: [
            { type: 'Ready', status: 'Unknown', lastHeartbeatTime: '2020-01-01T00:00:00Z' },
          ],
        },
      });
      const r = await cluster(['status', '--json']);
      t.equal(r.code, 1, r.stderr);
      const j = JSON.parse(r.stdout);
      t.match(
        j.nodes.find((n: { node: string }) => n.node === 'worker-1'),
        { phase: 'Ready', nodeReady: false, ready: false },
      );
      t.match(j.summary, /^2 of 3 nodes Ready .*worker-1's Node is not Ready/);
      const text = await cluster(['status']);
      t.match(text.stdout, /worker-1\s+False\s+Ready\s/);
      t.match(
        text.stderr,
        /: bring the kubelet of worker-1 back to Ready, then run this again$/m,
        'a stick cannot help it: not told to plug one',
      );
    },
  );
  t.test(
    'an agent silent for three heartbeats is stale: not ready, its age shown, no rate; its own heartbeatSeconds is honoured',
    async (t) => {
      allReady();
      const ago = (s: number) => new Date(Date.now() - s * 1000).toISOString();
      const quiet = nodeStatus('worker-0', 'Ready', b.fileDigest, b.version);
      quiet.status.updatedAt = ago(240);
      api.put('nodebundlestatuses', quiet);
      const copying = nodeStatus('worker-1', 'Staging', b.fileDigest, b.version);
      Object.assign(copying.status, {
        updatedAt: ago(200),
        bundle: { ...copying.status.bundle, media: '/run/media/STICK' },
        progress: {
          bytesDone: 5e8,
          bytesTotal: 1e9,
          imagesDone: 0,
          imagesTotal: 0,
          rate: 41_900_000,
        },
      });
      api.put('nodebundlestatuses', copying);
      const r = await cluster(['status', '--json']);
      t.equal(r.code, 1, r.stderr);
      const j = JSON.parse(r.stdout);
      const row = (n: string) => j.nodes.find((x: { node: string }) => x.node === n);
      t.match(row('worker-0'), { phase: 'Ready', stale: true, ready: false });
      t.ok(row('worker-0').heartbeatAge >= 240, 'its age in seconds');
      t.match(j.summary, /^1 of 3 nodes Ready .*worker-0's agent last reported 4 min ago \(stale/);
      t.notOk('rate' in row('worker-1'), 'a stale copy shows no rate');
      const text = await cluster(['status']);
      t.match(text.stdout, /worker-0\s.*4 min ago \(stale\)\s+no/);
      t.notMatch(text.stdout, /MiB\/s|MB\/s/, 'no rate printed for a stale row');
      t.match(
        text.stderr,
        /: check the agent on worker-0, worker-1 \("systemctl status bundle-agent" there\)/,
      );
      t.notMatch(text.stderr, /plug the stick/);
      // the same age from an agent that beats every 10 minutes is fresh
      quiet.status.heartbeatSeconds = 600;
      api.put('nodebundlestatuses', quiet);
      api.put('nodebundlestatuses', nodeStatus('worker-1', 'Ready', b.fileDigest, b.version));
      const again = await cluster(['status', '--json']);
      t.equal(again.code, 0, again.stdout);
    },
  );
  t.test('RBAC refuses listing nodes (a user with no binding): FORBIDDEN', async (t) => {
    allReady();
    const kc = await api.tokenKubeconfig(
      path.join(work, 'unbound.kubeconfig'),
      api.addToken('mallory'),
    );
    const r = await bundle(['cluster', 'status', '--kubeconfig', kc]);
    t.equal(r.code, 1);
    t.equal(errorCode(r.stderr), 'FORBIDDEN', r.stderr);
    t.match(r.stderr, /admin-rbac\.yaml/);
  });
  t.test('an unreachable API server: UNREACHABLE; a missing kubeconfig: KUBECONFIG', async (t) => {
    const dead = path.join(work, 'dead-kubeconfig');
    await writeFile(
      dead,
      (await import('node:fs'))
        .readFileSync(kubeconfig, 'utf8')
        .replace(`127.0.0.1:${api.port}`, '127.0.0.1:1'),
    );
    const r = await bundle(['cluster', 'status', '--kubeconfig', dead]);
    t.equal(errorCode(r.stderr), 'UNREACHABLE', r.stderr);
    const k = await bundle(['cluster', 'status', '--kubeconfig', path.join(work, 'nope')]);
    t.equal(errorCode(k.stderr), 'KUBECONFIG', k.stderr);
  });
});

t.test(
  'rollup: a node created after the running release completed, without it, is missing it',
  async (t) => {
    const { rollup } = await import('@offline-bundle/cluster');
    const at = (name: string, created?: string) => ({
      metadata: { name, ...(created ? { creationTimestamp: created } : {}) },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const st = (name: string, history: { version: string; state: string }[]) => ({
      metadata: { name },
      status: { phase: 'Idle', history },
    });
    const running = { version: '4.15.1', completionTime: '2026-11-01T01:00:00Z' };
    const nodes = [
      at('old', '2026-10-01T00:00:00Z'),
      at('new', '2026-11-20T00:00:00Z'),
      at('loaded', '2026-11-20T00:00:00Z'),
      at('seen', '2026-11-20T00:00:00Z'),
      at('unknown'),
    ];
    const statuses = [
      st('loaded', [{ version: '4.15.1', state: 'complete' }]),
      st('seen', [{ version: '4.15.1', state: 'running' }]),
    ];
    const r = rollup(nodes, statuses, undefined, running);
    t.same(
      r.rows
        .filter((x) => x.missingRunning)
        .map((x) => x.node)
        .sort(),
      ['new', 'seen'],
      'joined later and never loaded it (seeing it run is not holding it)',
    );
    t.match(r.summary, 'new is missing the running release 4.15.1: load the 4.15.1 bundle on it');
    t.notOk(
      rollup(nodes, statuses, undefined, { version: '4.15.1' }).rows.some((x) => x.missingRunning),
      'no completion time (or not OpenShift): nothing claimed',
    );
  },
);

t.test(
  "rollup: staleness is three of the agent's heartbeats (default 60 s, at most 300), a report with no time is stale, one dated over a heartbeat ahead is stale and says so",
  async (t) => {
    const { rollup } = await import('@offline-bundle/cluster');
    const now = new Date('2026-12-01T12:00:00Z');
    const n = (name: string) => ({
      metadata: { name },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const d = 'sha256:' + 'ab'.repeat(32);
    const st = (name: string, updatedAt: string | undefined, heartbeatSeconds?: number) => ({
      metadata: { name },
      status: {
        phase: 'Ready',
        updatedAt,
        ...(heartbeatSeconds ? { heartbeatSeconds } : {}),
        bundle: { digest: d },
        conditions: [{ type: 'Ready', status: 'True' }],
      },
    });
    const r = rollup(
      ['at180', 'at181', 'none', 'ahead', 'abit', 'slow', 'claims'].map(n),
      [
        st('at180', '2026-12-01T11:57:00Z'),
        st('at181', '2026-12-01T11:56:59Z'),
        st('none', undefined),
        st('ahead', '2026-12-01T12:05:00Z'),
        st('abit', '2026-12-01T12:00:30Z'),
        st('slow', '2026-12-01T11:50:00Z', 300),
        st('claims', '2026-11-30T12:00:00Z', 86_400),
      ],
      d,
      undefined,
      now,
    );
    t.same(
      r.rows.map((x) => [x.node, x.stale, x.ready]),
      [
        ['abit', false, true],
        ['ahead', true, false],
        ['at180', false, true],
        ['at181', true, false],
        ['claims', true, false],
        ['none', true, false],
        ['slow', false, true],
      ],
    );
    t.equal(r.ready, false);
    t.match(r.summary, "none's agent reported no time");
    t.match(
      r.summary,
      "ahead's agent reported from 5 min ahead of this clock (stale: set the clocks right",
    );
  },
);

t.test(
  'rollup: a node whose runtime lost images it loaded (status.runtime) is not ready, however Ready its agent says it is (#38)',
  async (t) => {
    const { rollup, nextSteps } = await import('@offline-bundle/cluster');
    const now = new Date('2026-12-01T12:00:00Z');
    const digest = 'sha256:' + 'ab'.repeat(32);
    const n = (name: string) => ({
      metadata: { name },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    const runtime = (missing: string[]) => ({
      observedAt: now.toISOString(),
      images: 5,
      pinned: 5,
      references: 10,
      digest: 'sha256:' + 'cd'.repeat(32),
      pinsReported: true,
      bundle: { refs: 10, missing, unpinned: [], truncated: false },
      held: { pinned: [], unpinned: [], truncated: false },
    });
    const st = (name: string, missing: string[]) => ({
      metadata: { name },
      status: {
        phase: 'Ready',
        updatedAt: now.toISOString(),
        bundle: { version: '4.16.1', digest },
        conditions: [{ type: 'Ready', status: 'True', reason: 'Pinned' }],
        runtime: runtime(missing),
      },
    });
    const r = rollup(
      ['a', 'b', 'c'].map(n),
      [
        st('a', []),
        st('b', ['quay.io/acme/app@sha256:' + '12'.repeat(32), 'quay.io/acme/db:1']),
        st('c', []),
      ],
      undefined,
      undefined,
      now,
    );
    t.equal(r.digest, digest, 'the bundle is still the one the nodes loaded');
    t.same(
      r.rows.map((x) => [x.node, x.ready]),
      [
        ['a', true],
        ['b', false],
        ['c', true],
      ],
    );
    t.match(r.rows[1], {
      lacking: { count: 2, example: /^quay\.io\/acme\/app@sha256:/ },
      reason: 'ImagesLost',
      message: /^its runtime no longer holds 2 image names it loaded/,
    });
    t.match(
      r.summary,
      /^2 of 3 nodes Ready .*b's runtime no longer holds 2 image names it loaded \(quay\.io\/acme\/app@sha256:1212\S+, …\), though its agent said Ready/,
    );
    t.equal(r.ready, false);
    t.match(nextSteps(r), /plug the stick into b/, 'a stick brings them back');
    t.ok(
      rollup(['a'].map(n), [st('a', [])], undefined, undefined, now).ready,
      'nothing missing: ready',
    );
    const notPreloaded = st('a', ['quay.io/acme/db:1']);
    notPreloaded.status.conditions = [{ type: 'Ready', status: 'True', reason: 'NotPreloaded' }];
    t.notOk(
      rollup(['a'].map(n), [notPreloaded], undefined, undefined, now).rows[0]!.lacking,
      'preload.method none: nothing was loaded to lack',
    );
    const loading = {
      ...st('a', ['quay.io/acme/db:1']),
      status: { ...st('a', ['quay.io/acme/db:1']).status, phase: 'Preloading' },
    };
    t.notOk(
      rollup(['a'].map(n), [loading], undefined, undefined, now).rows[0]!.lacking,
      'mid-load: not said to lack what it is loading',
    );
  },
);
