// tier: unit
// status.serving and bundle.fromPeers (issue #22): toResource keeps them only when the CRD
// (deploy/crd.yaml) accepts them, so a bad value never costs the node its whole status, and
// the CRD refuses what a fetching node would ignore anyway.
import t from 'tap';
import {
  emptyStatus,
  LIMITS,
  PEER_PORT_MAX,
  PEER_PORT_MIN,
  toResource,
  type NodeStatus,
} from '@offline-bundle/status';
import { compileSchema, crdSchema, loadCrd, type Doc } from './lib.js';

const D = `sha256:${'ab'.repeat(32)}`;
const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
const withServing = (serving: Record<string, unknown>, fromPeers?: string[]): NodeStatus => ({
  ...emptyStatus('w1'),
  bundle: { file: '/x', ...(fromPeers ? { fromPeers } : {}) },
  serving: {
    manifestDigest: D,
    complete: false,
    verifiedBlobs: 2,
    address: '10.0.0.1',
    port: 9470,
    ...serving,
  } as NodeStatus['serving'],
});

t.test('toResource: a valid serving and fromPeers pass through and validate', async (t) => {
  for (const [address, port] of [
    ['10.0.0.1', PEER_PORT_MIN],
    ['fd00::1', PEER_PORT_MAX],
    ['2001:db8:aaaa:bbbb:cccc:dddd:255.255.255.255', 9470],
  ] as const) {
    const o = toResource(withServing({ address, port }, ['w2', 'w3']), 'w1');
    t.same(o.status.serving, {
      manifestDigest: D,
      complete: false,
      verifiedBlobs: 2,
      address,
      port,
    });
    t.ok(validate(o), `${address}:${port} valid: ${JSON.stringify(validate.errors)}`);
  }
  t.same(toResource(withServing({}, ['w2', 'w3']), 'w1').status.bundle?.fromPeers, ['w2', 'w3']);
});

t.test(
  'toResource: a serving the CRD would refuse is left out, the rest of the status kept',
  async (t) => {
    for (const [what, bad] of [
      ['a port below 9000', { port: PEER_PORT_MIN - 1 }],
      ['a port above 9999', { port: PEER_PORT_MAX + 1 }],
      ['a fractional port', { port: 9470.5 }],
      ['a host name', { address: 'evil.example.com' }],
      ['an address with a port', { address: '10.0.0.1:80' }],
      ['a bad digest', { manifestDigest: 'sha256:zz' }],
    ] as const) {
      const o = toResource(withServing(bad), 'w1');
      t.equal(o.status.serving, undefined, what);
      t.ok(validate(o), `${what}: the status still validates`);
    }
    const counted = toResource(withServing({ verifiedBlobs: -3, complete: 'yes' }), 'w1').status
      .serving!;
    t.same(
      [counted.verifiedBlobs, counted.complete],
      [0, false],
      'counts made non-negative, complete only when true',
    );
    const many = Array.from({ length: 40 }, (_, i) => `w${i}`);
    const peers = toResource(withServing({}, ['Bad_Name', ...many, 'w0']), 'w1').status.bundle!
      .fromPeers!;
    t.equal(peers.length, LIMITS.fromPeers, 'fromPeers capped');
    t.notOk(peers.includes('Bad_Name'), 'not a node name: dropped');
  },
);

t.test('the CRD refuses a serving a fetching node would ignore', async (t) => {
  const good = toResource(withServing({}), 'w1') as unknown as Doc;
  for (const [what, field, value, re] of [
    ['port 22', 'port', 22, /port must be >= 9000/],
    ['port 10250', 'port', 10250, /port must be <= 9999/],
    ['a host name', 'address', 'evil.example', /address must match pattern/],
    [
      'an overlong address',
      'address',
      '1'.repeat(LIMITS.address + 1),
      /address must NOT have more than 45/,
    ],
    ['negative blobs', 'verifiedBlobs', -1, /verifiedBlobs must be >= 0/],
  ] as const) {
    const o = structuredClone(good);
    o.status.serving[field] = value;
    t.notOk(validate(o), what);
    t.match(
      (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`).join('\n'),
      re,
      what,
    );
  }
  const missing = structuredClone(good);
  delete missing.status.serving.address;
  t.notOk(validate(missing), 'every field is required');
});
