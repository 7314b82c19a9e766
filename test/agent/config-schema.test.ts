// tier: unit
// The editor-facing schema (systemd/config.schema.json, shipped for yaml-language-server) and
// the agent's own check are one: the agent validates with that very file (#26). Here, as an
// editor would see them (a plain strict ajv, nothing of the agent's), against the agent:
// the shipped and deployed configs pass both; a key left empty reads as its schema default in
// both; each mistake is refused by both, the agent naming its key in one line.
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { parseConfig, ConfigError, type AgentConfig } from '@offline-bundle/agent';

const minimal = 'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n';
const read = (rel: string) => readFile(new URL(`../../${rel}`, import.meta.url), 'utf8');

type Node = { type?: string | string[]; default?: unknown; properties?: Record<string, Node> };
const schema = JSON.parse(await read('systemd/config.schema.json')) as Node;
const { Ajv } = (await import('ajv')) as unknown as {
  Ajv: new (o: object) => {
    compile(s: object): ((d: unknown) => boolean) & { errors?: unknown[] };
  };
};
const editor = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true }).compile(schema);

/** Every key of the schema with its node, as "section.key". */
function keys(node: Node, prefix = ''): [string, Node][] {
  return Object.entries(node.properties ?? {}).flatMap(([k, v]) => [
    [`${prefix}${k}`, v] as [string, Node],
    ...keys(v, `${prefix}${k}.`),
  ]);
}

/** The configs this repository ships or deploys, as the node finally reads them. */
async function deployedConfigs(): Promise<[string, string][]> {
  const daemonset = parseAllDocuments(await read('deploy/kubernetes/daemonset.yaml'))
    .map((d) => d.toJS())
    .find((d) => d?.kind === 'ConfigMap');
  const shared: string = daemonset.data['config.yaml'];
  return [
    ['systemd/config.example.yaml', await read('systemd/config.example.yaml')],
    ['deploy/openshift/config.yaml.in', await read('deploy/openshift/config.yaml.in')],
    ['deploy/kubernetes/daemonset.yaml (ConfigMap config.yaml)', shared],
    // what node-config.sh (the DaemonSet's init container) makes of it on a node
    [
      "deploy/kubernetes/daemonset.yaml, with node-config.sh's lines",
      `${shared}\n# added by node-config.sh for this node\nnodeName: "worker-1"\nversion:\n  current: "1.30.2"\n`,
    ],
  ];
}

t.test(
  'every config shipped or deployed validates in an editor and loads in the agent',
  async (t) => {
    for (const [name, text] of await deployedConfigs()) {
      t.ok(editor(parse(text)), `the schema accepts ${name}: ${JSON.stringify(editor.errors)}`);
      t.doesNotThrow(() => parseConfig(text, name), `and so does the agent: ${name}`);
    }
  },
);

t.test("a key left empty is accepted by both and reads as the schema's default", async (t) => {
  const defaults = parseConfig(minimal);
  const at = (c: AgentConfig, key: string) =>
    key.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown>)?.[k], c);
  let checked = 0;
  for (const [key, node] of keys(schema)) {
    // trust is checked as a whole below; a section is a mapping; containerd.ctr takes anything (ignored)
    if (key.startsWith('trust') || node.properties || (!node.type && !('enum' in node))) continue;
    const [section, sub] = key.split('.');
    const doc = sub ? `${minimal}${section}:\n  ${sub}:\n` : `${minimal}${section}:\n`;
    const nullable = [node.type ?? []].flat().includes('null');
    if (!nullable) {
      // keys whose absence means something of its own (no digest, no kubeconfig, ...): empty is refused by both
      t.notOk(editor(parse(doc)), `the schema refuses ${key} left empty`);
      t.throws(
        () => parseConfig(doc),
        { message: new RegExp(`: ${key.replace('.', '\\.')}: is required$`) },
        `and the agent names ${key}`,
      );
      continue;
    }
    t.ok(editor(parse(doc)), `the schema accepts ${key} left empty`);
    const c = parseConfig(doc);
    t.same(at(c, key), at(defaults, key), `${key} left empty reads as when it is absent`);
    if (node.default !== undefined) {
      const want = key === 'space.reserveBytes' ? 1024 ** 3 : node.default;
      t.same(
        at(c, key),
        want,
        `${key}: the schema's default is the agent's (${JSON.stringify(node.default)})`,
      );
      checked++;
    }
  }
  t.ok(checked >= 25, `the schema gives the agent's static defaults (${checked} keys)`);
});

// [mistake, document, the key named, what the line says]
const bad: [string, string, string, RegExp][] = [
  [
    'an unknown key',
    `${minimal}bogus: 1\n`,
    'bogus',
    /^unknown key \(known: root, nodeName, runtime, .*staging, peers, preload.*selfUpgrade\)$/,
  ],
  [
    'a misspelt nested key',
    `${minimal}version:\n  curent: "1"\n`,
    'version.curent',
    /^unknown key \(known: current, fromCluster, /,
  ],
  ['a relative root', `root: tmp\n${minimal}`, 'root', /^must be an absolute path$/],
  ['a root that is not a string', `root: 5\n${minimal}`, 'root', /^must be a non-empty string$/],
  ['an unknown runtime', `runtime: docker\n${minimal}`, 'runtime', /^must be crio or containerd$/],
  ['no trust', 'runtime: crio\n', 'trust', /^give keys .* and\/or digest/],
  ['trust left empty', 'trust:\n', 'trust', /^give keys /],
  ['no keys and no digest', 'trust:\n  keys: []\n', 'trust', /^give keys /],
  ['keys that are not a list', 'trust:\n  keys: /k.pub\n', 'trust.keys', /^must be a list$/],
  [
    'a relative key path',
    'trust:\n  keys: [k.pub]\n',
    'trust.keys[0]',
    /^must be an absolute path \(it is taken under root\)$/,
  ],
  ['an empty key path', 'trust:\n  keys: [""]\n', 'trust.keys[0]', /^must be a non-empty string$/],
  [
    'a digest that is not one',
    'trust:\n  digest: sha256:xyz\n',
    'trust.digest',
    /^must be sha256:<64 hex digits>$/,
  ],
  ['a section that is not a mapping', `${minimal}version: 5\n`, 'version', /^must be a mapping$/],
  [
    'an unquoted version',
    `${minimal}version:\n  current: 4.10\n`,
    'version.current',
    /^must be quoted \("4\.1"\)/,
  ],
  [
    'a boolean as a string',
    `${minimal}version:\n  allowDowngrade: "no"\n`,
    'version.allowDowngrade',
    /^must be true or false$/,
  ],
  [
    'a negative wait',
    `${minimal}version:\n  clusterWaitMinutes: -1\n`,
    'version.clusterWaitMinutes',
    /^must be a whole number of at least 0$/,
  ],
  [
    'a relative path',
    `${minimal}paths:\n  upgradeDir: var/lib\n`,
    'paths.upgradeDir',
    /^must be an absolute path \(it is taken under root\)$/,
  ],
  [
    'roots that are not a list',
    `${minimal}media:\n  roots: /media\n`,
    'media.roots',
    /^must be a list$/,
  ],
  [
    'a fraction of a second',
    `${minimal}media:\n  pollSeconds: 1.5\n`,
    'media.pollSeconds',
    /^must be a whole number of at least 1$/,
  ],
  [
    'a size that is not one',
    `${minimal}space:\n  reserveBytes: lots\n`,
    'space.reserveBytes',
    /^must be a byte count such as 1073741824 or "1GiB"$/,
  ],
  [
    'a negative size',
    `${minimal}space:\n  reserveBytes: -1\n`,
    'space.reserveBytes',
    /^must be a byte count/,
  ],
  [
    'a keep that is neither',
    `${minimal}staging:\n  keep: sometimes\n`,
    'staging.keep',
    /^must be true, false or untilComplete$/,
  ],
  [
    'an unknown preload method',
    `${minimal}preload:\n  method: pull\n`,
    'preload.method',
    /^must be cri, command or none$/,
  ],
  [
    'an empty argument',
    `${minimal}preload:\n  method: command\n  command: [crictl, ""]\n`,
    'preload.command[1]',
    /^must be a non-empty string$/,
  ],
  [
    'no concurrency',
    `${minimal}preload:\n  concurrency: 0\n`,
    'preload.concurrency',
    /^must be a whole number of at least 1$/,
  ],
  [
    'a stall watchdog that never waits',
    `${minimal}preload:\n  stallSeconds: 0\n`,
    'preload.stallSeconds',
    /^must be a whole number of at least 1$/,
  ],
  [
    'a command as one string',
    `${minimal}reload:\n  command: systemctl reload crio\n`,
    'reload.command',
    /^must be a list$/,
  ],
  [
    'an empty namespace',
    `${minimal}containerd:\n  namespace: ""\n`,
    'containerd.namespace',
    /^must be a non-empty string$/,
  ],
  [
    'an upper-case prefix',
    `${minimal}prefix: Offline\n`,
    'prefix',
    /^must be lowercase letters, digits and dashes$/,
  ],
  [
    'a node name Kubernetes refuses',
    `${minimal}nodeName: Worker_1\n`,
    'nodeName',
    /^"Worker_1" is not a Kubernetes node name/,
  ],
  [
    'a node name longer than 253',
    `${minimal}nodeName: ${'a'.repeat(254)}\n`,
    'nodeName',
    /is not a Kubernetes node name .*at most 253/,
  ],
  [
    'a status address beyond this node',
    `${minimal}status:\n  listen: 0.0.0.0:9469\n`,
    'status.listen',
    /^must be a loopback address such as 127\.0\.0\.1:9469$/,
  ],
  [
    'a port above 65535',
    `${minimal}status:\n  listen: 127.0.0.1:99999\n`,
    'status.listen',
    /^must be a loopback address/,
  ],
  [
    'a peer port below 9000',
    `${minimal}peers:\n  port: 8443\n`,
    'peers.port',
    /^must be a port from 9000 to 9999 \(OpenShift's range for host services; peers ignore any other\)$/,
  ],
  [
    'a peer port above 9999',
    `${minimal}peers:\n  port: 10250\n`,
    'peers.port',
    /^must be a port from 9000 to 9999/,
  ],
  [
    'a peer port as a string',
    `${minimal}peers:\n  port: "9470"\n`,
    'peers.port',
    /^must be a port from 9000 to 9999/,
  ],
  [
    'a relative kubeconfig',
    `${minimal}status:\n  kubeconfig: kube\n`,
    'status.kubeconfig',
    /^must be an absolute path/,
  ],
  [
    'yes for true (YAML 1.2: a string)',
    `${minimal}status:\n  console: yes\n`,
    'status.console',
    /^must be true or false$/,
  ],
  [
    'selfUpgrade.mode tarball (not built)',
    `${minimal}selfUpgrade:\n  mode: tarball\n`,
    'selfUpgrade.mode',
    /^tarball is not built yet: .*install\.sh/,
  ],
  [
    'an unknown selfUpgrade.mode',
    `${minimal}selfUpgrade:\n  mode: docker\n`,
    'selfUpgrade.mode',
    /^must be off or quadlet$/,
  ],
  [
    'a unit name that is not one',
    `${minimal}selfUpgrade:\n  unit: "a b;rm"\n`,
    'selfUpgrade.unit',
    /^must be a systemd unit name/,
  ],
  [
    'no time to confirm',
    `${minimal}selfUpgrade:\n  confirmMinutes: 0\n`,
    'selfUpgrade.confirmMinutes',
    /^must be a whole number of at least 1$/,
  ],
];
// rules between keys: the schema's description names them, the agent checks them
const betweenKeys: [string, string, string, RegExp][] = [
  [
    'method command without its argv',
    `${minimal}preload:\n  method: command\n`,
    'preload.command',
    /^is required when preload\.method is command/,
  ],
  [
    'quadlet on containerd',
    `runtime: containerd\n${minimal}selfUpgrade:\n  mode: quadlet\n`,
    'selfUpgrade.mode',
    /^quadlet needs runtime crio/,
  ],
  [
    'fromCluster without a kubeconfig',
    `${minimal}version:\n  fromCluster: true\n`,
    'version.fromCluster',
    /^needs status\.kubeconfig/,
  ],
  [
    'peers without a kubeconfig',
    `${minimal}peers:\n  enabled: true\n`,
    'peers.enabled',
    /^needs status\.kubeconfig \(peers are found through the cluster/,
  ],
];

t.test(
  'each mistake: refused by the schema, and by the agent in one line naming the key and the fix',
  async (t) => {
    for (const [name, doc, key, what] of [...bad, ...betweenKeys]) {
      if (!betweenKeys.some(([n]) => n === name))
        t.notOk(editor(parse(doc)), `the schema refuses ${name}`);
      const err = t.throws(
        () => parseConfig(doc, 'cfg.yaml'),
        `the agent refuses ${name}`,
      ) as ConfigError;
      t.type(err, ConfigError);
      t.equal(err.problems.length, 1, `one line for ${name}: ${err.problems.join(' | ')}`);
      const [file, at, ...rest] = (err.problems[0] ?? '').split(': ');
      t.same([file, at], ['cfg.yaml', key], `${name}: names ${key}`);
      t.match(rest.join(': '), what, `${name}: says what to write`);
    }
  },
);
