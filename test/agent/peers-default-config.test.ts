// tier: unit
// Peers on by default (issue #42 item 3), as the shipped files say it: the schema's default; every
// shipped config as a node reads it (OpenShift's config.yaml.in and the MachineConfigs generated
// from it, the DaemonSet's ConfigMap, the example) has peers on; OpenShift keeps, for the closure
// anyway, the copy a peer serves from, the DaemonSet (which cannot see a k3s release complete)
// none; the DaemonSet mounts the peer keys' Secret, optional, where the config reads them; peers
// off or no kubeconfig start nothing; and what the keys' check says of a default install (none
// made) and of keys that are there but unusable.
import t from 'tap';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { createLogger, parseConfig, readPeerKeys, startPeers } from '@offline-bundle/agent';
import { StatusTracker, emptyStatus } from '@offline-bundle/status';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = join(import.meta.dirname, '../..');
const read = (p: string) => readFile(join(ROOT, p), 'utf8');
const minimal =
  'trust:\n  digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\n';

/** The config.yaml a MachineConfig writes, as the node gets it (Ignition's data URL, gzip). */
async function machineConfigYaml(file: string): Promise<string> {
  const mc = parseYaml(await read(file));
  const f = mc.spec.config.storage.files.find(
    (x: { path: string }) => x.path === '/etc/bundle-agent/config.yaml',
  );
  return gunzipSync(
    Buffer.from(f.contents.source.replace(/^data:;base64,/, ''), 'base64'),
  ).toString('utf8');
}

async function daemonSet() {
  const docs = parseAllDocuments(await read('deploy/kubernetes/daemonset.yaml')).map((d) =>
    d.toJS(),
  );
  return {
    cm: docs.find((d) => d?.kind === 'ConfigMap'),
    ds: docs.find((d) => d?.kind === 'DaemonSet'),
  };
}

t.test('the default is on; an admin turns it off with peers.enabled: false', async (t) => {
  t.equal(parseConfig(minimal).peers.enabled, true, 'no peers key at all: on');
  t.equal(
    parseConfig(`${minimal}peers:\n  enabled: false\n`).peers.enabled,
    false,
    'off when said',
  );
  t.doesNotThrow(
    () => parseConfig(minimal),
    'on by default without status.kubeconfig is no mistake (the node stays inert)',
  );
  t.throws(
    () => parseConfig(`${minimal}peers:\n  enabled: true\n`),
    /peers\.enabled: needs status\.kubeconfig/,
    'asking for it by name without a kubeconfig still is',
  );
});

t.test(
  'every shipped config has peers on; OpenShift keeps the copy a peer serves from, the DaemonSet does not',
  async (t) => {
    const openshift = await read('deploy/openshift/config.yaml.in');
    for (const [name, text] of [
      ['config.yaml.in', openshift],
      ...(await Promise.all(
        ['master', 'worker'].map(async (r) => [
          `99-${r}-bundle-agent.yaml`,
          await machineConfigYaml(`deploy/openshift/99-${r}-bundle-agent.yaml`),
        ]),
      )),
    ] as [string, string][]) {
      const c = parseConfig(text, name);
      t.equal(c.peers.enabled, true, `${name}: peers on`);
      t.equal(c.peers.port, 9470, `${name}: on the documented port`);
      t.ok(c.status.kubeconfig, `${name}: with the kubeconfig approvals are read with`);
      t.ok(
        c.staging.serveUntilComplete,
        `${name}: the layout is kept and served until the release is complete (what a peer serves from)`,
      );
    }
    for (const r of ['master', 'worker'])
      t.equal(
        await machineConfigYaml(`deploy/openshift/99-${r}-bundle-agent.yaml`),
        openshift,
        `99-${r}: regenerated from config.yaml.in (generate.mjs)`,
      );
    const { cm } = await daemonSet();
    const k3s = parseConfig(cm.data['config.yaml'], 'daemonset.yaml');
    t.equal(k3s.peers.enabled, true, 'DaemonSet: peers on');
    // the agent there reads the running version (k3s --version) at pod start only, and an in-place
    // k3s upgrade does not restart the pod: untilComplete would keep every loaded layout
    t.equal(
      k3s.staging.keep,
      false,
      'DaemonSet: no layout kept after Ready (nothing tells the agent there the release completed)',
    );
    t.match(
      await read('deploy/kubernetes/daemonset.yaml'),
      /in-place k3s upgrade does not restart the pod/,
      'and the ConfigMap says why, with the ways to let bundles travel',
    );
    const example = parseConfig(await read('systemd/config.example.yaml'), 'config.example.yaml');
    t.equal(example.peers.enabled, true, 'the example: on by default (inert there: no kubeconfig)');
  },
);

t.test(
  "the DaemonSet mounts the peer keys' Secret, optional, where the config reads them, root-only",
  async (t) => {
    const { cm, ds } = await daemonSet();
    const c = parseConfig(cm.data['config.yaml'], 'daemonset.yaml');
    const pod = ds.spec.template.spec;
    const agent = pod.containers.find((x: { name: string }) => x.name === 'bundle-agent');
    const mount = agent.volumeMounts.find(
      (m: { mountPath: string }) => m.mountPath === dirname(c.peers.ca),
    );
    t.ok(mount?.readOnly, `mounted read-only at ${dirname(c.peers.ca)}`);
    t.same(
      [c.peers.cert, c.peers.key].map((f) => dirname(f)),
      [dirname(c.peers.ca), dirname(c.peers.ca)],
      'cert and key beside the CA',
    );
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount?.name);
    t.same(
      volume?.secret,
      { secretName: 'bundle-agent-peers', optional: true, defaultMode: 0o400 },
      'a Secret the pod starts without; the key readable by root only',
    );
    t.equal(
      agent.ports.find((p: { name: string }) => p.name === 'peers')?.containerPort,
      c.peers.port,
      'its port listed',
    );
  },
);

t.test('peers off, or no kubeconfig: nothing starts; the latter says so in one line', async (t) => {
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (chunk, _e, cb) => {
        lines.push(String(chunk));
        cb();
      },
    }),
  );
  const d = (text: string) => ({
    config: parseConfig(text),
    log,
    tracker: new StatusTracker(emptyStatus('node-a')),
    signal: new AbortController().signal,
    agentVersion: '0.0.0',
    exclusive: <T>(fn: () => Promise<T>) => fn(),
  });
  t.equal(await startPeers(d(`${minimal}peers:\n  enabled: false\n`)), undefined, 'off: nothing');
  t.same(lines, [], 'and nothing said');
  t.equal(await startPeers(d(minimal)), undefined, 'on without status.kubeconfig: nothing');
  t.equal(lines.length, 1, 'one line');
  t.match(lines[0], /status\.kubeconfig is not set.*opens no peer port and fetches nothing/);
});

t.test(
  "the keys' check: none made (a default install), or there but unusable: why, in one line",
  async (t) => {
    const dir = await tmpdir(t, 'ob-peer-keys-');
    const paths = {
      ca: join(dir, 'peers/ca.crt'),
      cert: join(dir, 'peers/node.crt'),
      key: join(dir, 'peers/node.key'),
    };
    const none = await readPeerKeys(paths);
    t.match(none, { reason: 'NoPeerCredentials' });
    t.match(
      'message' in none ? none.message : '',
      new RegExp(
        `not installed \\(${paths.ca}, ${paths.cert}, ${paths.key} missing\\): this node opens no peer port \\(never one without mutual TLS\\).*peer-ca\\.mjs.*peers\\.enabled: false$`,
      ),
    );
    await mkdir(dirname(paths.ca), { recursive: true });
    for (const f of Object.values(paths))
      await writeFile(f, 'not a certificate\n', { mode: 0o600 });
    await chmod(dirname(paths.ca), 0o755);
    const bad = await readPeerKeys(paths);
    t.match(bad, { reason: 'PeerCredentialsInvalid' });
    t.match(
      'message' in bad ? bad.message : '',
      /is not PEM.*until then this node opens no peer port/,
    );
    t.notMatch('message' in bad ? bad.message : '', /\n/, 'one line');
  },
);
