// tier: unit
// The metrics: section (issue #39): off by default, the listener's files under root, and the
// rules between keys named in one line each.
import t from 'tap';
import { parseConfig } from '@offline-bundle/agent';

const TRUST = `trust: { digest: "sha256:${'0'.repeat(64)}" }`;
const parse = (...lines: string[]) => parseConfig([TRUST, ...lines, ''].join('\n'), 'c.yaml');
const problems = (...lines: string[]) => {
  try {
    parse(...lines);
    return [];
  } catch (err) {
    return (err as { problems: string[] }).problems;
  }
};

t.test('off by default; port 9471; files taken under root', async (t) => {
  t.strictSame(parse().metrics, { enabled: false, port: 9471 });
  const c = parse(
    'root: /host',
    'status: { kubeconfig: /k }',
    'metrics: { enabled: true, address: "fd00::5", cert: /c.pem, key: /c.pem, clientCA: /ca.pem }',
  );
  t.strictSame(c.metrics, {
    enabled: true,
    address: 'fd00::5',
    port: 9471,
    cert: '/host/c.pem',
    key: '/host/c.pem',
    clientCA: '/host/ca.pem',
  });
});

t.test('refused, each with its fix', async (t) => {
  t.strictSame(problems('metrics: { enabled: true }'), [
    "c.yaml: metrics.enabled: needs status.kubeconfig (each request's token and access are reviewed by the API server)",
  ]);
  t.strictSame(problems('status: { kubeconfig: /k }', 'metrics: { enabled: true, cert: /c.pem }'), [
    'c.yaml: metrics.key: metrics.cert and metrics.key go together: give both, or neither for a self-signed certificate',
  ]);
  t.strictSame(problems('metrics: { address: node-1 }'), [
    "c.yaml: metrics.address: must be an IP address (or left out: the Node's InternalIP)",
  ]);
  t.strictSame(problems('metrics: { address: "1.2.3" }'), [
    'c.yaml: metrics.address: "1.2.3" is not an IP address: give the node\'s address (or leave it out for the Node\'s InternalIP)',
  ]);
  t.match(
    problems('metrics: { port: 0 }')[0],
    /^c\.yaml: metrics\.port: must be a whole number of at least 1/,
  );
  t.match(
    problems('metrics: { cert: relative.pem }')[0],
    /^c\.yaml: metrics\.cert: must be an absolute path/,
  );
  t.strictSame(problems('metrics: { address: "0.0.0.0" }'), [
    "c.yaml: metrics.address: 0.0.0.0 is the unspecified address: give the node's own address (or leave it out for the Node's InternalIP)",
  ]);
  t.strictSame(problems('metrics: { address: "::" }'), [
    "c.yaml: metrics.address: :: is the unspecified address: give the node's own address (or leave it out for the Node's InternalIP)",
  ]);
  t.strictSame(
    problems('metrics: { address: "fe80::1%eth0" }'),
    ["c.yaml: metrics.address: must be an IP address (or left out: the Node's InternalIP)"],
    'a zone ID: no node address',
  );
});

t.test(
  'an IPv4-mapped address is taken as IPv4 (what clients dial and the certificate names)',
  async (t) => {
    t.equal(parse('metrics: { address: "::ffff:10.0.0.5" }').metrics.address, '10.0.0.5');
  },
);
