// deploy/openshift and deploy/kubernetes, offline: the generated MachineConfigs and Butane files
// are current, validate (MachineConfig shape; the Ignition config inside against the Ignition 3.4
// schema subset they use), say the same thing, and carry configs the agent accepts; the
// DaemonSet and its ConfigMap validate with kubernetes-models.
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import Ajv from 'ajv';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { parseConfig, renderImageDropIn } from '@offline-bundle/agent';
import { readDoc } from '../helpers/docs.js';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const OS = join(ROOT, 'deploy/openshift');
const INSTALL_PAGES = ['docs/install.md', 'docs/packaging.md', 'docs/admin.md', 'docs/peers.md'];
const VERSION = JSON.parse(await readFile(join(ROOT, 'agent/package.json'), 'utf8'))
  .version as string;
const schema = async (name: string) =>
  JSON.parse(await readFile(new URL(`./schemas/${name}`, import.meta.url), 'utf8'));
const ajv = new (Ajv as unknown as typeof Ajv.default)({ allErrors: true, strict: false });
const validIgnition = ajv.compile(await schema('ignition-3.4-subset.json'));
// --plain-unit (OpenShift before 4.14, whose MCO takes Ignition up to 3.2)
const validIgnition32 = ajv.compile(await schema('ignition-3.2-subset.json'));
const validMachineConfig = ajv.compile(await schema('machineconfig.json'));
/** A file's text from its Ignition contents (a base64 data URL, gzip-compressed when `compression` says so). */
const decode = (contents: { source: string; compression?: string }) => {
  const bytes = Buffer.from(contents.source.replace(/^data:[^,]*;base64,/, ''), 'base64');
  return (contents.compression === 'gzip' ? gunzipSync(bytes) : bytes).toString('utf8');
};

/** The Quadlet / systemd INI as [section] → key → values. */
function ini(text: string): Map<string, Map<string, string[]>> {
  const out = new Map<string, Map<string, string[]>>();
  let sec: Map<string, string[]> | undefined;
  for (const line of text.split('\n')) {
    if (/^\s*(#|;|$)/.test(line)) continue;
    const s = line.match(/^\[(.+)\]$/);
    if (s) {
      out.set(s[1]!, (sec = new Map()));
      continue;
    }
    const kv = line.match(/^([A-Za-z]+)=(.*)$/);
    if (!kv || !sec) throw new Error(`not INI: ${line}`);
    sec.set(kv[1]!, [...(sec.get(kv[1]!) ?? []), kv[2]!]);
  }
  return out;
}

t.test(
  'openshift: the committed MachineConfigs and Butane files are what generate.mjs writes',
  async (t) => {
    const out = await tmpdir(t, 'ob-deploy-');
    execFileSync(process.execPath, [join(OS, 'generate.mjs'), '--out', out]);
    for (const f of (await readdir(out)).sort()) {
      t.equal(
        await readFile(join(OS, f), 'utf8'),
        await readFile(join(out, f), 'utf8'),
        `${f} is current (run node deploy/openshift/generate.mjs)`,
      );
    }
  },
);

t.test(
  'openshift: MachineConfigs validate, one per role, and install what the node needs',
  async (t) => {
    for (const role of ['master', 'worker']) {
      const mc = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.yaml`), 'utf8'));
      t.ok(
        validMachineConfig(mc),
        `${role}: MachineConfig shape ${JSON.stringify(validMachineConfig.errors ?? [])}`,
      );
      t.equal(mc.metadata.labels['machineconfiguration.openshift.io/role'], role);
      t.ok(
        validIgnition(mc.spec.config),
        `${role}: Ignition 3.4 config ${JSON.stringify(validIgnition.errors ?? [])}`,
      );
      const files = new Map<string, string>(
        mc.spec.config.storage.files.map((f: any) => [f.path, decode(f.contents)]),
      );
      t.equal(
        files.get('/etc/udev/rules.d/99-bundle-agent-media.rules'),
        await readFile(join(ROOT, 'systemd/99-bundle-agent-media.rules'), 'utf8'),
        'the udev rule, verbatim',
      );
      t.match(
        files.get('/etc/bundle-agent/keys/factory.pub') ?? '',
        /^-----BEGIN PUBLIC KEY-----/,
        'a trust key',
      );
      const config = parseConfig(files.get('/etc/bundle-agent/config.yaml')!, 'config.yaml');
      t.equal(config.runtime, 'crio', 'the agent accepts the config: CRI-O');
      t.equal(
        config.reload.command[0],
        'nsenter',
        "reload reaches the host's systemctl from the container",
      );
      const q = ini(files.get('/etc/containers/systemd/bundle-agent.container')!);
      const c = q.get('Container')!;
      t.ok(c.get('Image')?.[0], 'Quadlet: an image');
      t.same(
        c.get('Network'),
        ['host'],
        'Quadlet: host network (the runtime pulls from 127.0.0.1)',
      );
      t.match(c.get('PodmanArgs')?.join(' ') ?? '', /--privileged/, 'Quadlet: privileged');
      t.match(
        c.get('PodmanArgs')?.join(' ') ?? '',
        /--pid=host/,
        'Quadlet: host PID namespace for nsenter',
      );
      const vols = (c.get('Volume') ?? []).map((v) => v.split(':')[0]);
      for (const p of [
        '/etc/bundle-agent',
        '/var/lib/bundle-agent',
        '/var/lib/upgrade',
        '/etc/crio/crio.conf.d',
        '/etc/containers/registries.conf.d',
        '/var/run/crio',
        '/run/media',
        '/var/lib/kubelet/kubeconfig',
        '/var/lib/kubelet/pki',
      ]) {
        t.ok(vols.includes(p), `Quadlet: mounts ${p}`);
      }
      t.same(q.get('Install')?.get('WantedBy'), ['multi-user.target'], 'Quadlet: started at boot');
      t.ok(
        (c.get('Volume') ?? []).includes('/var/lib/kubelet/pki:/var/lib/kubelet/pki:ro'),
        "Quadlet: the kubelet's client certificate directory, read-only, beside its kubeconfig",
      );
      t.strictSame(
        q.get('Service')?.get('ExecCondition'),
        ['/bin/bash /etc/bundle-agent/bundle-agent-bootstrap.sh --installed'],
        'Quadlet: skipped (no restart loop) while no agent image is in storage',
      );
      // the bootstrap: the script verbatim, its units enabled
      t.equal(
        files.get('/etc/bundle-agent/bundle-agent-bootstrap.sh'),
        await readFile(join(OS, 'bundle-agent-bootstrap.sh'), 'utf8'),
        'the bootstrap, verbatim',
      );
      t.equal(
        mc.spec.config.storage.files.find(
          (f: any) => f.path === '/etc/bundle-agent/bundle-agent-bootstrap.sh',
        ).mode,
        0o755,
      );
      const units = new Map<string, any>(mc.spec.config.systemd.units.map((u: any) => [u.name, u]));
      for (const u of ['bundle-agent-bootstrap.service', 'bundle-agent-bootstrap.path']) {
        t.equal(units.get(u)?.contents, await readFile(join(OS, u), 'utf8'), `${u}, verbatim`);
        t.equal(units.get(u)?.enabled, true, `${u} enabled`);
      }
      t.match(
        files.get('/etc/tmpfiles.d/bundle-agent.conf') ?? '',
        /^d \/run\/media\/bundle-agent /m,
        'the directory the path unit watches exists from boot',
      );
      t.ok(
        JSON.stringify(mc).length < 64 * 1024,
        `small: ${JSON.stringify(mc).length} bytes in etcd per role (no image in it)`,
      );
      t.match(q.get('Unit')?.get('Wants')?.join(' ') ?? '', /crio\.service/);
    }
  },
);

t.test(
  'openshift self-upgrade (contract: file formats only, no Quadlet generator or systemd here): the drop-in directory exists, is mounted and is where the config writes',
  async (t) => {
    const mc = parseYaml(await readFile(join(OS, '99-worker-bundle-agent.yaml'), 'utf8'));
    const files = new Map<string, string>(
      mc.spec.config.storage.files.map((f: any) => [f.path, decode(f.contents)]),
    );
    const config = parseConfig(files.get('/etc/bundle-agent/config.yaml')!, 'config.yaml');
    const dir = '/etc/containers/systemd/bundle-agent.container.d';
    t.equal(config.selfUpgrade.mode, 'quadlet');
    t.equal(
      config.selfUpgrade.dropInDir,
      dir,
      'next to the unit, as Quadlet reads drop-ins (podman >= 4.5)',
    );
    const c = ini(files.get('/etc/containers/systemd/bundle-agent.container')!).get('Container')!;
    t.ok(
      (c.get('Volume') ?? []).includes(`${dir}:${dir}`),
      'the container mounts it read-write at the same path',
    );
    t.match(
      files.get('/etc/tmpfiles.d/bundle-agent.conf') ?? '',
      new RegExp(`^d ${dir.replace(/\./g, '\\.')} `, 'm'),
      'tmpfiles creates it (a bind mount needs it)',
    );
    t.strictSame(
      config.selfUpgrade.restart.slice(-4),
      ['systemctl', '--no-block', 'restart', 'bundle-agent'],
      'the restart returns before it stops the agent that asked',
    );
    t.equal(config.selfUpgrade.restart[0], 'nsenter');
    t.ok(
      config.selfUpgrade.scheduleRollback.includes('systemd-run'),
      'the rollback timer lives on the host, outside the unit it restarts',
    );
    const image = 'localhost/offline-bundle/bundle-agent@sha256:' + 'a'.repeat(64);
    const dropIn = ini(renderImageDropIn(image));
    t.strictSame([...dropIn.keys()], ['Container'], 'only [Container]');
    t.strictSame(
      [...dropIn.get('Container')!.entries()],
      [['Image', [image]]],
      'only Image=, by digest',
    );
    t.equal(
      files.get('/etc/containers/systemd/bundle-agent.container')!.match(/^Pull=never$/m)?.[0],
      'Pull=never',
      "the new image is taken from the node's storage, never pulled",
    );
    // the boot guard: installed, and the unit's ExecStartPre gives it the config's own paths
    const guard = files.get('/etc/bundle-agent/switch-guard.sh');
    t.equal(
      guard,
      await readFile(join(OS, 'switch-guard.sh'), 'utf8'),
      'switch-guard.sh installed verbatim',
    );
    t.equal(
      mc.spec.config.storage.files.find((f: any) => f.path === '/etc/bundle-agent/switch-guard.sh')
        .mode,
      0o755,
    );
    t.match(guard ?? '', /^#!\/bin\/sh\n/, 'plain /bin/sh');
    const service = ini(files.get('/etc/containers/systemd/bundle-agent.container')!).get(
      'Service',
    )!;
    t.strictSame(
      service.get('ExecStartPre'),
      [
        `/bin/sh /etc/bundle-agent/switch-guard.sh ${config.paths.stateDir} ${config.selfUpgrade.dropInDir} ${config.selfUpgrade.unit}`,
        `-/bin/rm -f ${config.paths.stateDir}/started`,
      ],
      "ExecStartPre runs the guard on the state and drop-in directories the agent writes, then removes the last start's marker where the agent writes it",
    );
    t.strictSame(
      service.get('ExecStartPost'),
      ['/bin/bash /etc/bundle-agent/bundle-agent-bootstrap.sh --wait-started 300'],
      'the kubelet waits (bounded) for the start-up marker',
    );
    t.strictSame(
      service.get('Restart'),
      ['on-failure'],
      'a start the guard fails is started again, on the previous image',
    );
    const unitPath = config.selfUpgrade.dropInDir.slice(0, -2);
    t.ok(
      (c.get('Volume') ?? []).includes(`${unitPath}:${unitPath}:ro`),
      'the unit file is mounted read-only where the agent looks for its Image= (a newer agent by MachineConfig)',
    );
  },
);

t.test('openshift: each Butane file says the same as its MachineConfig', async (t) => {
  const butaneSchema = {
    type: 'object',
    additionalProperties: false,
    required: ['variant', 'version', 'metadata'],
    properties: {
      variant: { const: 'openshift' },
      version: { type: 'string', pattern: '^4\\.(1[4-9]|[2-9]\\d)\\.0$' },
      metadata: { type: 'object', required: ['name', 'labels'] },
      systemd: {
        type: 'object',
        additionalProperties: false,
        properties: {
          units: {
            type: 'array',
            items: {
              type: 'object',
              required: ['name'],
              additionalProperties: false,
              properties: {
                name: { type: 'string' },
                enabled: { type: 'boolean' },
                mask: { type: 'boolean' },
                contents: { type: 'string' },
              },
            },
          },
        },
      },
      storage: {
        type: 'object',
        properties: {
          files: {
            type: 'array',
            items: {
              type: 'object',
              required: ['path'],
              additionalProperties: false,
              properties: {
                path: { type: 'string' },
                mode: { type: 'integer' },
                overwrite: { type: 'boolean' },
                contents: {
                  type: 'object',
                  additionalProperties: false,
                  properties: {
                    inline: { type: 'string' },
                    source: { type: 'string' },
                    local: { type: 'string' },
                  },
                },
              },
            },
          },
        },
      },
    },
  };
  const validButane = ajv.compile(butaneSchema);
  for (const role of ['master', 'worker']) {
    const bu = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.bu`), 'utf8'));
    const mc = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.yaml`), 'utf8'));
    t.ok(
      validButane(bu),
      `${role}: Butane openshift variant ${JSON.stringify(validButane.errors ?? [])}`,
    );
    t.same(bu.metadata, mc.metadata, `${role}: same name and role`);
    // What butane does with inline contents: a data URL in the Ignition config.
    const translated = bu.storage.files.map((f: any) => ({
      path: f.path,
      mode: f.mode,
      overwrite: f.overwrite,
      contents: f.contents.inline,
    }));
    const inMc = mc.spec.config.storage.files.map((f: any) => ({
      path: f.path,
      mode: f.mode,
      overwrite: f.overwrite,
      contents: decode(f.contents),
    }));
    t.same(translated, inMc, `${role}: same files, modes and contents`);
    t.same(bu.systemd.units, mc.spec.config.systemd.units, `${role}: same units`);
  }
});

t.test(
  'kubernetes: the DaemonSet and its ConfigMap validate; the agent accepts the config',
  async (t) => {
    const docs = parseAllDocuments(
      await readFile(join(ROOT, 'deploy/kubernetes/daemonset.yaml'), 'utf8'),
    ).map((d) => d.toJSON());
    const { DaemonSet } = await import('kubernetes-models/apps/v1/DaemonSet');
    const { ConfigMap } = await import('kubernetes-models/v1/ConfigMap');
    const cm = docs.find((d) => d.kind === 'ConfigMap');
    const ds = docs.find((d) => d.kind === 'DaemonSet');
    t.doesNotThrow(() => new ConfigMap(cm).validate(), 'ConfigMap validates');
    t.doesNotThrow(() => new DaemonSet(ds).validate(), 'DaemonSet validates');
    t.throws(
      () => new DaemonSet({ ...ds, spec: { ...ds.spec, selector: 'x' } }).validate(),
      'the validator does refuse a broken one',
    );
    const pod = ds.spec.template.spec;
    t.equal(pod.hostNetwork, true, 'host network');
    t.equal(pod.containers[0].securityContext.privileged, true, 'privileged');
    const config = parseConfig(cm.data['config.yaml'], 'config.yaml');
    t.equal(config.runtime, 'containerd');
    t.equal(
      config.criSocket,
      '/host/run/k3s/containerd/containerd.sock',
      'k3s socket under the host mount',
    );
    t.equal(
      config.paths.containerdCertsDir,
      '/host/var/lib/rancher/k3s/agent/etc/containerd/certs.d',
      'k3s hosts.toml directory',
    );
  },
);

const K8S = join(ROOT, 'deploy/kubernetes');
async function daemonSet() {
  const docs = parseAllDocuments(await readFile(join(K8S, 'daemonset.yaml'), 'utf8')).map((d) =>
    d.toJSON(),
  );
  return {
    cm: docs.find((d) => d.kind === 'ConfigMap'),
    ds: docs.find((d) => d.kind === 'DaemonSet'),
  };
}

t.test(
  'kubernetes: the agent container is probed at /livez and /readyz where its status endpoint listens',
  async (t) => {
    const { cm, ds } = await daemonSet();
    const config = parseConfig(cm.data['config.yaml'], 'config.yaml');
    t.ok(config.status.listen, 'status.listen is set, so the endpoint runs');
    const agent = ds.spec.template.spec.containers.find((c: any) => c.name === 'bundle-agent');
    t.equal(
      ds.spec.template.spec.hostNetwork,
      true,
      "the kubelet reaches the pod's loopback only with the host network",
    );
    for (const [probe, path] of [
      ['livenessProbe', '/livez'],
      ['readinessProbe', '/readyz'],
    ] as const) {
      const get = agent[probe]?.httpGet;
      t.strictSame(
        { host: get?.host, port: get?.port, path: get?.path },
        { host: config.status.listen!.host, port: config.status.listen!.port, path },
        `${probe}: ${path} at status.listen`,
      );
    }
  },
);

t.test(
  'kubernetes: no registry: every container imagePullPolicy Never, the image the stick brings (localhost/offline-bundle/bundle-agent)',
  async (t) => {
    const { ds } = await daemonSet();
    const pod = ds.spec.template.spec;
    for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
      t.equal(c.imagePullPolicy, 'Never', `${c.name}: never pulled`);
      t.match(
        c.image,
        /^localhost\/offline-bundle\/bundle-agent(:|@sha256:)/,
        `${c.name}: the name the sidecar archive imports under`,
      );
    }
  },
);

t.test(
  'kubernetes: status reaches the cluster as the node (kubelet kubeconfig, its certificates mounted at their host paths); no hard-coded running version',
  async (t) => {
    const { cm, ds } = await daemonSet();
    const config = parseConfig(cm.data['config.yaml'], 'config.yaml');
    t.equal(
      config.version.current,
      undefined,
      'no version.current in the shared ConfigMap (one value for every node, stale after the first upgrade)',
    );
    t.equal(
      config.status.kubeconfig,
      '/host/var/lib/rancher/k3s/agent/kubelet.kubeconfig',
      "the kubelet's kubeconfig, read under root (/host)",
    );
    const pod = ds.spec.template.spec;
    const agent = pod.containers.find((c: any) => c.name === 'bundle-agent');
    const mounts = new Map<string, any>(agent.volumeMounts.map((m: any) => [m.mountPath, m]));
    const volumes = new Map<string, any>(pod.volumes.map((v: any) => [v.name, v]));
    // k3s's kubelet.kubeconfig names /var/lib/rancher/k3s/agent/{server-ca.crt,client-kubelet.crt,client-kubelet.key}
    const creds = mounts.get('/var/lib/rancher/k3s/agent');
    t.ok(creds?.readOnly, 'the certificate directory, read-only, at its host path');
    t.equal(volumes.get(creds?.name)?.hostPath?.path, '/var/lib/rancher/k3s/agent');
    t.equal(
      volumes.get(mounts.get('/host')?.name)?.hostPath?.path,
      '/',
      'the kubeconfig itself under /host',
    );
    t.strictSame(
      agent.args,
      ['run', '--config', '/run/bundle-agent-config/config.yaml'],
      'the per-node config the init container writes',
    );
    const init = pod.initContainers.find((c: any) => c.name === 'node-config');
    t.strictSame(
      init.env,
      [{ name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } }],
      "the Node's name from the Downward API",
    );
    t.equal(pod.hostPID, true, "the host's PID 1 for nsenter");
    t.equal(
      cm.data['node-config.sh'],
      await readFile(join(K8S, 'node-config.sh'), 'utf8'),
      'node-config.sh in the ConfigMap, verbatim',
    );
  },
);

/** node-config.sh as the init container runs it: dash, nsenter --target 1 (PID 1 of a new PID namespace: this mount namespace). */
async function nodeConfig(
  t: any,
  opts: { bin?: Record<string, string>; node?: string; shared?: string },
) {
  const dir = await tmpdir(t, 'ob-nodecfg-');
  const bin = join(dir, 'bin');
  await mkdir(bin);
  // stand-ins for the host's k3s / rke2 / kubelet: they print what the real ones print for --version
  for (const [name, text] of Object.entries(opts.bin ?? {}))
    await writeFile(join(bin, name), `#!/bin/sh\nprintf '%s\\n' ${JSON.stringify(text)}\n`, {
      mode: 0o755,
    });
  const { cm } = await daemonSet();
  await writeFile(join(dir, 'shared.yaml'), opts.shared ?? cm.data['config.yaml']);
  const r = spawnSync(
    'unshare',
    [
      '--pid',
      '--fork',
      '--mount-proc',
      'dash',
      join(K8S, 'node-config.sh'),
      join(dir, 'shared.yaml'),
      join(dir, 'config.yaml'),
    ],
    {
      encoding: 'utf8',
      env: {
        PATH: `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`,
        ...(opts.node !== undefined ? { NODE_NAME: opts.node } : {}),
      },
    },
  );
  const out = await readFile(join(dir, 'config.yaml'), 'utf8').catch(() => undefined);
  return {
    status: r.status,
    stderr: r.stderr,
    config: out === undefined ? undefined : parseConfig(out, 'config.yaml'),
  };
}

t.test(
  'kubernetes node-config.sh: nodeName from NODE_NAME, the running version from k3s / rke2 / kubelet --version; refuses to guess',
  { skip: process.getuid?.() !== 0 && 'needs root (unshare --pid)' },
  async (t) => {
    const k3s = await nodeConfig(t, {
      node: 'worker-1',
      bin: { k3s: 'k3s version v1.30.2+k3s1 (aa9a0dc1)\ngo version go1.22.4' },
    });
    t.equal(k3s.status, 0, k3s.stderr);
    t.equal(k3s.config?.nodeName, 'worker-1');
    t.equal(k3s.config?.version.current, '1.30.2', 'k3s v1.30.2+k3s1 is release 1.30.2');
    t.equal(
      k3s.config?.status.kubeconfig,
      '/host/var/lib/rancher/k3s/agent/kubelet.kubeconfig',
      'the rest of the shared config kept',
    );
    const rke2 = await nodeConfig(t, {
      node: 'w2',
      bin: { rke2: 'rke2 version v1.29.9+rke2r1 (abc)' },
    });
    t.equal(rke2.config?.version.current, '1.29.9');
    const kubelet = await nodeConfig(t, { node: 'w3', bin: { kubelet: 'Kubernetes v1.31.1' } });
    t.equal(kubelet.config?.version.current, '1.31.1');
    const none = await nodeConfig(t, { node: 'w4' });
    t.equal(none.status, 1);
    t.match(
      none.stderr,
      /^node-config: cannot tell which release this node runs .*: set version\.current in the ConfigMap\n$/,
    );
    t.equal(none.config, undefined, 'no config: the agent does not start guessing');
    const pinned = await nodeConfig(t, {
      node: 'w5',
      shared: `${(await daemonSet()).cm.data['config.yaml']}version:\n  current: "1.28.0"\n`,
    });
    t.equal(pinned.status, 0, pinned.stderr);
    t.equal(
      pinned.config?.version.current,
      '1.28.0',
      'a version the admin set is kept, nothing run',
    );
    for (const bad of ['', 'Worker_1', '-x', 'a;b']) {
      const r = await nodeConfig(t, { node: bad, bin: { k3s: 'k3s version v1.30.2+k3s1' } });
      t.equal(r.status, 1, `NODE_NAME ${JSON.stringify(bad)} refused`);
      t.match(r.stderr, /is not a node name/);
    }
  },
);

const GENERATE = join(OS, 'generate.mjs');
const generate = (args: string[]) =>
  spawnSync(process.execPath, [GENERATE, ...args], { encoding: 'utf8' });

t.test(
  'generate.mjs: --help teaches (no stack trace); bad input is one line and exit 2; success says what was written',
  async (t) => {
    const help = generate(['--help']);
    t.equal(help.status, 0);
    t.match(help.stdout, /^Usage: node deploy\/openshift\/generate\.mjs /);
    t.match(help.stdout, /--plain-unit/);
    t.equal(help.stderr, '');
    const out = await tmpdir(t, 'ob-gen-');
    // an X.509 certificate of a P-256 key: Node would take it as a public key, the node's openssl
    // pkey -pubin cannot read it (every stick would be refused)
    const certDir = await tmpdir(t, 'ob-gen-cert-');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-subj',
        '/CN=factory',
        '-days',
        '1',
        '-keyout',
        join(certDir, 'c.key'),
        '-out',
        join(certDir, 'c.crt'),
      ],
      { stdio: 'ignore' },
    );
    const refused: [string[], RegExp][] = [
      [
        ['--key', join(certDir, 'c.crt')],
        /--key .*c\.crt: not one PEM public key .*openssl x509 -pubkey/,
      ],
      [
        ['--image', 'localhost/offline-bundle/bundle-agent@sha256:abc'],
        /"sha256:abc" is not a digest \(sha256: and 64 lowercase hex digits\)/,
      ],
      [
        ['--image', `localhost/offline-bundle/bundle-agent@sha256:${'A'.repeat(64)}`],
        /is not a digest/,
      ],
      [['--image', 'localhost/offline-bundle/bundle-agent'], /give a tag \(:VERSION\) or a digest/],
      [
        ['--image', 'quay.io/acme/bundle-agent:1.0.0'],
        /the agent image is loaded as localhost\/offline-bundle\/bundle-agent/,
      ],
      [['--key', join(out, 'missing.pub')], /--key .*missing\.pub: no such file/],
      [['--key', join(OS, 'config.yaml.in')], /not a PEM public key/],
      [['--out', join(out, 'nowhere')], /--out .*nowhere: not a directory/],
      [['--bogus'], /Unknown option '--bogus' \(see --help\)/],
    ];
    for (const [args, why] of refused) {
      const r = generate([
        ...args,
        '--out',
        args.includes('--out') ? args[args.indexOf('--out') + 1]! : out,
      ]);
      t.equal(r.status, 2, `${args.join(' ')}: exit 2`);
      t.match(r.stderr, why);
      t.equal(r.stderr.trim().split('\n').length, 1, 'one line, no stack');
      t.match(r.stderr, /^generate\.mjs: /);
    }
    t.strictSame(await readdir(out), [], 'nothing written by a refused run');
    const digest = `localhost/offline-bundle/bundle-agent@sha256:${'a'.repeat(64)}`;
    const ok = generate(['--image', digest, '--out', out]);
    t.equal(ok.status, 0, ok.stderr);
    t.match(
      ok.stdout,
      new RegExp(
        `^wrote ${out}/99-master-bundle-agent\\.yaml, .*99-worker-bundle-agent\\.bu \\(Quadlet unit, key example-factory\\.pub .*image ${digest.replace(/[.]/g, '\\.')} until a stick brings one\\)\\n$`,
      ),
    );
    t.strictSame((await readdir(out)).sort(), [
      '99-master-bundle-agent.bu',
      '99-master-bundle-agent.yaml',
      '99-worker-bundle-agent.bu',
      '99-worker-bundle-agent.yaml',
    ]);
    const mc = parseYaml(await readFile(join(out, '99-worker-bundle-agent.yaml'), 'utf8'));
    const q = decode(
      mc.spec.config.storage.files.find(
        (f: any) => f.path === '/etc/containers/systemd/bundle-agent.container',
      ).contents,
    );
    t.match(
      q,
      new RegExp(`^Image=${digest.replace(/[.]/g, '\\.')}$`, 'm'),
      'the unit names the image by digest',
    );
  },
);

t.test(
  "generate.mjs --plain-unit (podman before 4.4): a plain podman unit with the Quadlet unit's mounts, no Quadlet file, self-upgrade off; systemd-analyze verify passes",
  async (t) => {
    const out = await tmpdir(t, 'ob-plain-');
    const r = generate(['--plain-unit', '--out', out]);
    t.equal(r.status, 0, r.stderr);
    t.match(r.stdout, /\(plain podman unit, /);
    const mc = parseYaml(await readFile(join(out, '99-worker-bundle-agent.yaml'), 'utf8'));
    t.equal(
      mc.spec.config.ignition.version,
      '3.2.0',
      'Ignition 3.2: what the MCO before OpenShift 4.14 accepts',
    );
    t.ok(
      validIgnition32(mc.spec.config),
      `Ignition 3.2 subset: ${JSON.stringify(validIgnition32.errors ?? [])}`,
    );
    t.equal(
      parseYaml(await readFile(join(out, '99-worker-bundle-agent.bu'), 'utf8')).version,
      '4.8.0',
      'Butane openshift 4.8.0 (Ignition 3.2), which butane translates for 4.8 to 4.13',
    );
    const files = new Map<string, string>(
      mc.spec.config.storage.files.map((f: any) => [f.path, decode(f.contents)]),
    );
    t.notOk(files.has('/etc/containers/systemd/bundle-agent.container'), 'no Quadlet file');
    t.notOk(files.has('/etc/bundle-agent/switch-guard.sh'), 'no switch guard (no switch)');
    const config = parseConfig(files.get('/etc/bundle-agent/config.yaml')!, 'config.yaml');
    t.equal(
      config.selfUpgrade.mode,
      'off',
      'the agent accepts the config, and does not try a Quadlet switch',
    );
    const unit = mc.spec.config.systemd.units.find((u: any) => u.name === 'bundle-agent.service');
    t.equal(unit?.enabled, true);
    const svc = ini(unit.contents).get('Service')!;
    const exec = svc.get('ExecStart')![0]!;
    const quadlet = ini(await readFile(join(OS, 'bundle-agent.container'), 'utf8')).get(
      'Container',
    )!;
    const fromQuadlet = (quadlet.get('Volume') ?? []).filter(
      (v) => !v.startsWith('/etc/containers/systemd/'),
    );
    const fromPlain = [...exec.matchAll(/ -v (\S+)/g)].map((m) => m[1]);
    t.strictSame(
      fromPlain,
      fromQuadlet,
      'the same mounts, from the one list in bundle-agent.container',
    );
    t.ok(fromPlain.includes('/var/lib/kubelet/pki:/var/lib/kubelet/pki:ro'));
    t.match(
      exec,
      /^\/usr\/bin\/podman run .* --pull=never .*--network=host --privileged --pid=host --security-opt=label=disable .* \$\{BUNDLE_AGENT_IMAGE\} run --config \/etc\/bundle-agent\/config\.yaml$/,
    );
    t.strictSame(
      svc.get('Environment')?.[0],
      `BUNDLE_AGENT_IMAGE=localhost/offline-bundle/bundle-agent:${VERSION}`,
      "the image pnpm package tags: the agent's version",
    );
    t.strictSame(svc.get('ExecCondition'), [
      '/bin/bash /etc/bundle-agent/bundle-agent-bootstrap.sh --installed',
    ]);
    // systemd's own parser over the three units (podman, bash exist on this machine)
    const dir = await tmpdir(t, 'ob-plain-units-');
    for (const u of mc.spec.config.systemd.units) await writeFile(join(dir, u.name), u.contents);
    await mkdir(join(dir, 'bundle-agent.service.d'));
    await writeFile(
      join(dir, 'bundle-agent.service.d', 'image.conf'),
      `[Service]\nEnvironment=BUNDLE_AGENT_IMAGE=localhost/offline-bundle/bundle-agent@sha256:${'a'.repeat(64)}\n`,
    );
    const v = spawnSync(
      'systemd-analyze',
      [
        'verify',
        'bundle-agent.service',
        'bundle-agent-bootstrap.service',
        'bundle-agent-bootstrap.path',
      ],
      { encoding: 'utf8', env: { ...process.env, SYSTEMD_UNIT_PATH: `${dir}:` } },
    );
    t.equal(v.status, 0, v.stderr);
    t.notMatch(v.stderr, /bundle-agent/, `no warnings about our units: ${v.stderr}`);
  },
);

t.test(
  'no step of the install reaches for a registry: no "mirror registry" in the install files or the docs\' Install',
  async (t) => {
    // README's Install chapter moved to these pages (issue #41): the platforms, the tarballs and
    // image, the admin's upgrade and the peers' set-up; each is read whole
    const texts: [string, string][] = INSTALL_PAGES.map((f) => [f, readDoc(f)]);
    for (const f of await readdir(OS)) texts.push([f, await readFile(join(OS, f), 'utf8')]);
    texts.push([
      'daemonset.yaml',
      await readFile(join(ROOT, 'deploy/kubernetes/daemonset.yaml'), 'utf8'),
    ]);
    for (const [name, text] of texts) {
      t.notMatch(
        text,
        /mirror registry|install-time mirror|push(ing)? the image/i,
        `${name}: no registry step`,
      );
      t.notMatch(text, /skopeo copy [^\n]*docker:\/\//, `${name}: no skopeo copy to a registry`);
    }
  },
);
