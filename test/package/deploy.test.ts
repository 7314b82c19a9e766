// deploy/openshift and deploy/kubernetes, offline: the generated MachineConfigs and Butane files
// are current, validate (MachineConfig shape; the Ignition config inside against the Ignition 3.4
// schema subset they use), say the same thing, and carry configs the agent accepts; the
// DaemonSet and its ConfigMap validate with kubernetes-models.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import Ajv from 'ajv';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { parseConfig, renderImageDropIn } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const OS = join(ROOT, 'deploy/openshift');
const schema = async (name: string) => JSON.parse(await readFile(new URL(`./schemas/${name}`, import.meta.url), 'utf8'));
const ajv = new (Ajv as unknown as typeof Ajv.default)({ allErrors: true, strict: false });
const validIgnition = ajv.compile(await schema('ignition-3.4-subset.json'));
const validMachineConfig = ajv.compile(await schema('machineconfig.json'));
const decode = (source: string) => Buffer.from(source.replace(/^data:[^,]*;base64,/, ''), 'base64').toString('utf8');

/** The Quadlet / systemd INI as [section] → key → values. */
function ini(text: string): Map<string, Map<string, string[]>> {
  const out = new Map<string, Map<string, string[]>>();
  let sec: Map<string, string[]> | undefined;
  for (const line of text.split('\n')) {
    if (/^\s*(#|;|$)/.test(line)) continue;
    const s = line.match(/^\[(.+)\]$/);
    if (s) { out.set(s[1]!, (sec = new Map())); continue; }
    const kv = line.match(/^([A-Za-z]+)=(.*)$/);
    if (!kv || !sec) throw new Error(`not INI: ${line}`);
    sec.set(kv[1]!, [...(sec.get(kv[1]!) ?? []), kv[2]!]);
  }
  return out;
}

t.test('openshift: the committed MachineConfigs and Butane files are what generate.mjs writes', async (t) => {
  const out = await tmpdir(t, 'ob-deploy-');
  execFileSync(process.execPath, [join(OS, 'generate.mjs'), '--out', out]);
  for (const f of (await readdir(out)).sort()) {
    t.equal(await readFile(join(OS, f), 'utf8'), await readFile(join(out, f), 'utf8'), `${f} is current (run node deploy/openshift/generate.mjs)`);
  }
});

t.test('openshift: MachineConfigs validate, one per role, and install what the node needs', async (t) => {
  for (const role of ['master', 'worker']) {
    const mc = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.yaml`), 'utf8'));
    t.ok(validMachineConfig(mc), `${role}: MachineConfig shape ${JSON.stringify(validMachineConfig.errors ?? [])}`);
    t.equal(mc.metadata.labels['machineconfiguration.openshift.io/role'], role);
    t.ok(validIgnition(mc.spec.config), `${role}: Ignition 3.4 config ${JSON.stringify(validIgnition.errors ?? [])}`);
    const files = new Map<string, string>(mc.spec.config.storage.files.map((f: any) => [f.path, decode(f.contents.source)]));
    t.equal(files.get('/etc/udev/rules.d/99-bundle-agent-media.rules'), await readFile(join(ROOT, 'systemd/99-bundle-agent-media.rules'), 'utf8'), 'the udev rule, verbatim');
    t.match(files.get('/etc/bundle-agent/keys/factory.pub') ?? '', /^-----BEGIN PUBLIC KEY-----/, 'a trust key');
    const config = parseConfig(files.get('/etc/bundle-agent/config.yaml')!, 'config.yaml');
    t.equal(config.runtime, 'crio', 'the agent accepts the config: CRI-O');
    t.equal(config.reload.command[0], 'nsenter', 'reload reaches the host\'s systemctl from the container');
    const q = ini(files.get('/etc/containers/systemd/bundle-agent.container')!);
    const c = q.get('Container')!;
    t.ok(c.get('Image')?.[0], 'Quadlet: an image');
    t.same(c.get('Network'), ['host'], 'Quadlet: host network (the runtime pulls from 127.0.0.1)');
    t.match(c.get('PodmanArgs')?.join(' ') ?? '', /--privileged/, 'Quadlet: privileged');
    t.match(c.get('PodmanArgs')?.join(' ') ?? '', /--pid=host/, 'Quadlet: host PID namespace for nsenter');
    const vols = (c.get('Volume') ?? []).map((v) => v.split(':')[0]);
    for (const p of ['/etc/bundle-agent', '/var/lib/bundle-agent', '/var/lib/upgrade', '/etc/crio/crio.conf.d', '/etc/containers/registries.conf.d', '/var/run/crio', '/run/media']) {
      t.ok(vols.includes(p), `Quadlet: mounts ${p}`);
    }
    t.same(q.get('Install')?.get('WantedBy'), ['multi-user.target'], 'Quadlet: started at boot');
    t.match(q.get('Unit')?.get('Wants')?.join(' ') ?? '', /crio\.service/);
  }
});

t.test('openshift self-upgrade (contract: file formats only, no Quadlet generator or systemd here): the drop-in directory exists, is mounted and is where the config writes', async (t) => {
  const mc = parseYaml(await readFile(join(OS, '99-worker-bundle-agent.yaml'), 'utf8'));
  const files = new Map<string, string>(mc.spec.config.storage.files.map((f: any) => [f.path, decode(f.contents.source)]));
  const config = parseConfig(files.get('/etc/bundle-agent/config.yaml')!, 'config.yaml');
  const dir = '/etc/containers/systemd/bundle-agent.container.d';
  t.equal(config.selfUpgrade.mode, 'quadlet');
  t.equal(config.selfUpgrade.dropInDir, dir, 'next to the unit, as Quadlet reads drop-ins (podman >= 4.5)');
  const c = ini(files.get('/etc/containers/systemd/bundle-agent.container')!).get('Container')!;
  t.ok((c.get('Volume') ?? []).includes(`${dir}:${dir}`), 'the container mounts it read-write at the same path');
  t.match(files.get('/etc/tmpfiles.d/bundle-agent.conf') ?? '', new RegExp(`^d ${dir.replace(/\./g, '\\.')} `, 'm'), 'tmpfiles creates it (a bind mount needs it)');
  t.strictSame(config.selfUpgrade.restart.slice(-4), ['systemctl', '--no-block', 'restart', 'bundle-agent'], 'the restart returns before it stops the agent that asked');
  t.equal(config.selfUpgrade.restart[0], 'nsenter');
  t.ok(config.selfUpgrade.scheduleRollback.includes('systemd-run'), 'the rollback timer lives on the host, outside the unit it restarts');
  const image = 'localhost/offline-bundle/bundle-agent@sha256:' + 'a'.repeat(64);
  const dropIn = ini(renderImageDropIn(image));
  t.strictSame([...dropIn.keys()], ['Container'], 'only [Container]');
  t.strictSame([...dropIn.get('Container')!.entries()], [['Image', [image]]], 'only Image=, by digest');
  t.equal(files.get('/etc/containers/systemd/bundle-agent.container')!.match(/^Pull=never$/m)?.[0], 'Pull=never', 'the new image is taken from the node\'s storage, never pulled');
  // the boot guard: installed, and the unit's ExecStartPre gives it the config's own paths
  const guard = files.get('/etc/bundle-agent/switch-guard.sh');
  t.equal(guard, await readFile(join(OS, 'switch-guard.sh'), 'utf8'), 'switch-guard.sh installed verbatim');
  t.equal(mc.spec.config.storage.files.find((f: any) => f.path === '/etc/bundle-agent/switch-guard.sh').mode, 0o755);
  t.match(guard ?? '', /^#!\/bin\/sh\n/, 'plain /bin/sh');
  const service = ini(files.get('/etc/containers/systemd/bundle-agent.container')!).get('Service')!;
  t.strictSame(service.get('ExecStartPre'), [`/bin/sh /etc/bundle-agent/switch-guard.sh ${config.paths.stateDir} ${config.selfUpgrade.dropInDir} ${config.selfUpgrade.unit}`],
    'ExecStartPre runs the guard on the state and drop-in directories the agent writes');
  t.strictSame(service.get('Restart'), ['on-failure'], 'a start the guard fails is started again, on the previous image');
  const unitPath = config.selfUpgrade.dropInDir.slice(0, -2);
  t.ok((c.get('Volume') ?? []).includes(`${unitPath}:${unitPath}:ro`), 'the unit file is mounted read-only where the agent looks for its Image= (a newer agent by MachineConfig)');
});

t.test('openshift: each Butane file says the same as its MachineConfig', async (t) => {
  const butaneSchema = {
    type: 'object', additionalProperties: false, required: ['variant', 'version', 'metadata'],
    properties: {
      variant: { const: 'openshift' }, version: { type: 'string', pattern: '^4\\.(1[4-9]|[2-9]\\d)\\.0$' },
      metadata: { type: 'object', required: ['name', 'labels'] },
      storage: { type: 'object', properties: { files: { type: 'array', items: { type: 'object', required: ['path'], additionalProperties: false,
        properties: { path: { type: 'string' }, mode: { type: 'integer' }, overwrite: { type: 'boolean' }, contents: { type: 'object', additionalProperties: false, properties: { inline: { type: 'string' }, source: { type: 'string' }, local: { type: 'string' } } } } } } } },
    },
  };
  const validButane = ajv.compile(butaneSchema);
  for (const role of ['master', 'worker']) {
    const bu = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.bu`), 'utf8'));
    const mc = parseYaml(await readFile(join(OS, `99-${role}-bundle-agent.yaml`), 'utf8'));
    t.ok(validButane(bu), `${role}: Butane openshift variant ${JSON.stringify(validButane.errors ?? [])}`);
    t.same(bu.metadata, mc.metadata, `${role}: same name and role`);
    // What butane does with inline contents: a data URL in the Ignition config.
    const translated = bu.storage.files.map((f: any) => ({ path: f.path, mode: f.mode, overwrite: f.overwrite, contents: f.contents.inline }));
    const inMc = mc.spec.config.storage.files.map((f: any) => ({ path: f.path, mode: f.mode, overwrite: f.overwrite, contents: decode(f.contents.source) }));
    t.same(translated, inMc, `${role}: same files, modes and contents`);
  }
});

t.test('kubernetes: the DaemonSet and its ConfigMap validate; the agent accepts the config', async (t) => {
  const docs = parseAllDocuments(await readFile(join(ROOT, 'deploy/kubernetes/daemonset.yaml'), 'utf8')).map((d) => d.toJSON());
  const { DaemonSet } = await import('kubernetes-models/apps/v1/DaemonSet');
  const { ConfigMap } = await import('kubernetes-models/v1/ConfigMap');
  const cm = docs.find((d) => d.kind === 'ConfigMap');
  const ds = docs.find((d) => d.kind === 'DaemonSet');
  t.doesNotThrow(() => new ConfigMap(cm).validate(), 'ConfigMap validates');
  t.doesNotThrow(() => new DaemonSet(ds).validate(), 'DaemonSet validates');
  t.throws(() => new DaemonSet({ ...ds, spec: { ...ds.spec, selector: 'x' } }).validate(), 'the validator does refuse a broken one');
  const pod = ds.spec.template.spec;
  t.equal(pod.hostNetwork, true, 'host network');
  t.equal(pod.containers[0].securityContext.privileged, true, 'privileged');
  const config = parseConfig(cm.data['config.yaml'], 'config.yaml');
  t.equal(config.runtime, 'containerd');
  t.equal(config.criSocket, '/host/run/k3s/containerd/containerd.sock', 'k3s socket under the host mount');
  t.equal(config.paths.containerdCertsDir, '/host/var/lib/rancher/k3s/agent/etc/containerd/certs.d', 'k3s hosts.toml directory');
});
