import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { parseConfig, ConfigError } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, run } from './fixtures.js';

const minimal = 'trust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\n';

t.test('parseConfig', async (t) => {
  t.test('applies defaults and puts every path under root', async (t) => {
    const c = parseConfig(`root: /tmp/r\nruntime: containerd\narch: amd64\n${minimal}`);
    t.equal(c.runtime, 'containerd');
    t.equal(c.paths.upgradeDir, '/tmp/r/var/lib/upgrade');
    t.equal(c.paths.stateDir, '/tmp/r/var/lib/bundle-agent');
    t.equal(c.paths.statusFile, '/tmp/r/var/lib/bundle-agent/status.json');
    t.equal(c.paths.containerdCertsDir, '/tmp/r/etc/containerd/certs.d');
    t.equal(c.paths.imageStoreDir, '/tmp/r/var/lib/containerd');
    t.equal(c.criSocket, '/tmp/r/run/containerd/containerd.sock');
    t.same(c.trust.keys, ['/tmp/r/etc/bundle-agent/keys/factory.pub']);
    t.same(c.media.roots, ['/tmp/r/media', '/tmp/r/run/media', '/tmp/r/mnt']);
    t.equal(c.version.allowDowngrade, false);
    t.equal(c.space.reserveBytes, 1024 ** 3);
    t.same(c.reload.command, []);
  });

  t.test('crio defaults', async (t) => {
    const c = parseConfig(minimal);
    t.equal(c.runtime, 'crio');
    t.equal(c.root, '/');
    t.equal(c.criSocket, '/var/run/crio/crio.sock');
    t.equal(c.paths.crioDropInDir, '/etc/crio/crio.conf.d');
    t.equal(c.paths.registriesDropInDir, '/etc/containers/registries.conf.d');
    t.same(c.reload.command, ['systemctl', 'reload', 'crio']);
  });

  t.test('reads the documented keys', async (t) => {
    const c = parseConfig(`root: /r
runtime: crio
criSocket: /var/run/crio/crio.sock
trust:
  keys: [/k.pub]
  digest: sha256:${'a'.repeat(64)}
version:
  current: "4.14.38"
  allowDowngrade: true
space:
  reserveBytes: 2GiB
`);
    t.equal(c.version.current, '4.14.38');
    t.equal(c.version.allowDowngrade, true);
    t.equal(c.trust.digest, `sha256:${'a'.repeat(64)}`);
    t.equal(c.space.reserveBytes, 2 * 1024 ** 3);
  });

  t.test(
    'selfUpgrade: off unless asked; quadlet defaults reach the host through nsenter, the restart does not wait',
    async (t) => {
      t.equal(parseConfig(minimal).selfUpgrade.mode, 'off');
      const c = parseConfig(`root: /r\n${minimal}selfUpgrade:\n  mode: quadlet\n`);
      t.equal(
        c.selfUpgrade.dropInDir,
        '/r/etc/containers/systemd/bundle-agent.container.d',
        'under root',
      );
      t.strictSame(c.selfUpgrade.restart.slice(-4), [
        'systemctl',
        '--no-block',
        'restart',
        'bundle-agent',
      ]);
      t.strictSame(c.selfUpgrade.daemonReload.slice(-2), ['systemctl', 'daemon-reload']);
      t.equal(c.selfUpgrade.daemonReload[0], 'nsenter');
      t.equal(c.selfUpgrade.confirmMinutes, 10);
    },
  );

  t.test(
    'the shipped example (systemd/config.example.yaml) is valid and fails closed on an unknown version',
    async (t) => {
      const file = new URL('../../systemd/config.example.yaml', import.meta.url);
      const c = parseConfig(await readFile(file, 'utf8'), 'config.example.yaml');
      t.equal(c.version.current, '4.14.38');
      t.equal(c.version.allowUnknown, false);
    },
  );

  const bad: [string, string, RegExp][] = [
    ['no trust', 'runtime: crio\n', /trust/],
    ['unknown runtime', `runtime: docker\n${minimal}`, /runtime/],
    ['unknown key', `${minimal}bogus: 1\n`, /bogus/],
    ['unknown nested key', `${minimal}version:\n  curent: "1"\n`, /version\.curent/],
    ['relative root', `root: tmp\n${minimal}`, /root/],
    ['relative path', `${minimal}paths:\n  upgradeDir: var/lib\n`, /paths\.upgradeDir/],
    ['bad digest', 'trust:\n  digest: sha256:xyz\n', /trust\.digest/],
    ['bad size', `${minimal}space:\n  reserveBytes: lots\n`, /space\.reserveBytes/],
    ['bad bool', `${minimal}version:\n  allowDowngrade: "no"\n`, /version\.allowDowngrade/],
    ['command without argv', `${minimal}preload:\n  method: command\n`, /preload\.command/],
    ['not yaml', 'trust: [\n', /YAML/],
    [
      'selfUpgrade.mode tarball (not built)',
      `${minimal}selfUpgrade:\n  mode: tarball\n`,
      /selfUpgrade\.mode: tarball is not built yet: .*install\.sh/,
    ],
    [
      'unknown selfUpgrade.mode',
      `${minimal}selfUpgrade:\n  mode: docker\n`,
      /selfUpgrade\.mode: must be off or quadlet/,
    ],
    [
      'quadlet on containerd',
      `runtime: containerd\n${minimal}selfUpgrade:\n  mode: quadlet\n`,
      /selfUpgrade\.mode: quadlet needs runtime crio/,
    ],
    [
      'a unit name that is not one',
      `${minimal}selfUpgrade:\n  unit: "a b;rm"\n`,
      /selfUpgrade\.unit/,
    ],
    [
      'a node name Kubernetes refuses',
      `${minimal}nodeName: Worker_1\n`,
      /nodeName: "Worker_1" is not a Kubernetes node name/,
    ],
    ['a port above 65535', `${minimal}status:\n  listen: 127.0.0.1:99999\n`, /status\.listen/],
    [
      'a size with a leading space',
      `${minimal}space:\n  reserveBytes: " 1GiB"\n`,
      /space\.reserveBytes/,
    ],
  ];
  for (const [name, text, key] of bad) {
    t.test(`rejects ${name}, naming the key`, async (t) => {
      const err = t.throws(() => parseConfig(text, 'cfg.yaml')) as Error;
      t.type(err, ConfigError);
      t.match(err.message, key);
      t.match(err.message, /^cfg\.yaml: /);
      t.notMatch(err.message, /\n/);
    });
  }
});

// one run names every problem: a misspelt key and a wrong value in the same file are both reported
const several = `${minimal}verison:\n  current: "1"\nspace:\n  reserveBytes: lots\npreload:\n  concurrency: 0\nstatus:\n  listen: 0.0.0.0:9469\n`;

t.test(
  'parseConfig reports every problem of a file at once, one line each naming the key',
  async (t) => {
    const err = t.throws(() => parseConfig(several, 'cfg.yaml')) as ConfigError;
    t.type(err, ConfigError);
    t.same(err.problems.map((p) => p.split(': ')[1]).sort(), [
      'preload.concurrency',
      'space.reserveBytes',
      'status.listen',
      'verison',
    ]);
    for (const p of err.problems)
      t.match(p, /^cfg\.yaml: [\w.[\]]+: \S.*$/, `one line naming key and fix: ${p}`);
    t.match(
      err.problems[0],
      /unknown key \(known: .*version/,
      'the misspelt key is named with the known ones',
    );
  },
);

t.test(
  'a value that is wrong is reported once, not again by the checks that read it',
  async (t) => {
    const err = t.throws(() =>
      parseConfig('trust:\n  keys: /k.pub\nversion:\n  current: 4.10\n', 'cfg.yaml'),
    ) as ConfigError;
    t.same(err.problems, [
      'cfg.yaml: trust.keys: must be a list',
      'cfg.yaml: version.current: must be quoted ("4.1"): YAML reads an unquoted 4.10 as the number 4.1',
    ]);
  },
);

t.test(
  'bundle-agent prints every config problem on its own line; the exit code stays 1',
  async (t) => {
    const dir = await tmpdir(t, 'ob-config-');
    const file = join(dir, 'config.yaml');
    await writeFile(file, several, { mode: 0o600 });
    const r = await run(AGENT, ['status', '--config', file]);
    t.equal(r.code, 1);
    const lines = r.stderr.trimEnd().split('\n');
    t.equal(lines.length, 4, r.stderr);
    for (const l of lines)
      t.match(l, new RegExp(`^bundle-agent: InvalidConfig: ${file.replace(/[.]/g, '\\.')}: `));
    const json = await run(AGENT, ['status', '--config', file, '--json']);
    t.equal(json.code, 1);
    const message: string = JSON.parse(json.stdout).error.message;
    t.equal(message.split('; /').length, 4, 'JSON: every problem in one message');
    for (const key of ['verison', 'space.reserveBytes', 'preload.concurrency', 'status.listen'])
      t.ok(message.includes(`: ${key}: `), `JSON names ${key}`);
  },
);

t.test(
  'a node name Kubernetes refuses is an InvalidConfig line among the others, before any cluster call',
  async (t) => {
    const dir = await tmpdir(t, 'ob-config-');
    const file = join(dir, 'config.yaml');
    await writeFile(
      file,
      `root: ${dir}\nnodeName: Worker_1\n${minimal}status:\n  kubeconfig: /kubeconfig\npreload:\n  concurrency: 0\n`,
      { mode: 0o600 },
    );
    const r = await run(AGENT, ['run', '--config', file]);
    t.equal(r.code, 1);
    const lines = r.stderr.trimEnd().split('\n');
    t.same(
      lines
        .map((l) => l.replace(/^bundle-agent: InvalidConfig: [^:]+: ([\w.]+): .*$/, '$1'))
        .sort(),
      ['nodeName', 'preload.concurrency'],
      r.stderr,
    );
    t.match(
      r.stderr,
      /nodeName: "Worker_1" is not a Kubernetes node name \(lowercase letters, digits, '-' and '\.'; at most 253\)/,
    );
  },
);

// the kubelet lowercases the host name it registers the Node under; the agent's default does the same
t.test(
  'the default nodeName is the host name lowercased; one that stays invalid is a config error',
  { skip: process.getuid?.() !== 0 && 'needs root (unshare --uts)' },
  async (t) => {
    // /proc/sys/kernel/hostname: sethostname(2) takes what hostname(1) refuses, as an installer's might
    const config = new URL('../../agent/dist/config.js', import.meta.url).href;
    const withHost = (host: string) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const script = `import { parseConfig } from ${JSON.stringify(config)};
try { console.log(parseConfig(${JSON.stringify(minimal)}, 'cfg.yaml').nodeName); } catch (e) { console.log(e.problems.join('|')); }`;
        execFile(
          'unshare',
          [
            '--uts',
            'sh',
            '-c',
            'printf %s "$1" > /proc/sys/kernel/hostname && exec "$2" --input-type=module -e "$3"',
            'sh',
            host,
            process.execPath,
            script,
          ],
          (err, stdout) => resolve({ code: err ? 1 : 0, out: stdout.trim() }),
        );
      });
    t.same(await withHost('Worker-1.Example.COM'), { code: 0, out: 'worker-1.example.com' });
    t.same(await withHost('worker_1'), {
      code: 0,
      out: "cfg.yaml: nodeName: the host name \"worker_1\" is not a Kubernetes node name (lowercase letters, digits, '-' and '.'; at most 253): set nodeName",
    });
  },
);

// systemd/config.schema.json, shipped beside the example (share/bundle-agent/) for editors and
// CI checks (#26). The agent validates with that schema (config-schema.ts) and then checks the
// rules between keys; this holds the two to the same keys and types (config-schema.test.ts: more).
t.test(
  'the shipped JSON Schema: valid (ajv, strict), accepts the example, knows exactly the keys the agent knows',
  async (t) => {
    const { Ajv } = (await import('ajv')) as unknown as {
      Ajv: new (o: object) => {
        compile(
          s: object,
        ): ((d: unknown) => boolean) & { errors?: { instancePath: string; message?: string }[] };
      };
    };
    const { parse } = await import('yaml');
    const schema = JSON.parse(
      await readFile(new URL('../../systemd/config.schema.json', import.meta.url), 'utf8'),
    );
    const validate = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true }).compile(
      schema,
    );
    const example = parse(
      await readFile(new URL('../../systemd/config.example.yaml', import.meta.url), 'utf8'),
    );
    t.ok(validate(example), `the example validates: ${JSON.stringify(validate.errors)}`);

    const knownBy = (doc: string): string[] => {
      const err = t.throws(() => parseConfig(doc)) as ConfigError;
      const line = err.problems.find((p) => p.includes('zzz: unknown key'))!;
      return /\(known: (.*)\)$/
        .exec(line)![1]!
        .split(', ')
        .filter((k) => k !== 'ctr')
        .sort();
    };
    const props = (o: { properties: Record<string, unknown> }) =>
      Object.keys(o.properties)
        .filter((k) => k !== 'ctr')
        .sort();
    t.same(props(schema), knownBy(`${minimal}zzz: 1\n`), 'top-level keys');
    for (const [section, sub] of Object.entries(
      schema.properties as Record<string, { properties?: Record<string, unknown> }>,
    )) {
      if (!sub.properties) continue;
      t.same(
        props(sub as { properties: Record<string, unknown> }),
        knownBy(
          `${section === 'trust' ? '' : minimal}${section}:\n  zzz: 1\n${section === 'trust' ? '  keys: [/k]\n' : ''}`,
        ),
        `${section}: the same keys`,
      );
    }
    for (const [name, doc] of [
      ['a misspelt key', `${minimal}verison: {}\n`],
      ['a boolean as a string', `${minimal}version:\n  allowDowngrade: "no"\n`],
      ['a size that is not one', `${minimal}space:\n  reserveBytes: lots\n`],
      ['a count below its minimum', `${minimal}preload:\n  concurrency: 0\n`],
      ['an unknown runtime', `${minimal}runtime: docker\n`],
      ['no trust', 'runtime: crio\n'],
      ['a relative path', `${minimal}paths:\n  upgradeDir: var/lib\n`],
      ['a node name with upper case and an underscore', `${minimal}nodeName: Worker_1\n`],
      ['a node name longer than 253', `${minimal}nodeName: ${'a'.repeat(254)}\n`],
      ['a port above 65535', `${minimal}status:\n  listen: 127.0.0.1:99999\n`],
      ['a port of six digits', `${minimal}status:\n  listen: 127.0.0.1:065535\n`],
      ['a size with a leading space', `${minimal}space:\n  reserveBytes: " 1GiB"\n`],
      ['a size with a trailing space', `${minimal}space:\n  reserveBytes: "1GiB "\n`],
    ] as const) {
      t.notOk(validate(parse(doc)), `the schema refuses ${name}`);
      t.throws(() => parseConfig(doc), ConfigError, `and so does the agent: ${name}`);
    }
    // the edges of what both accept, so neither is stricter than the other
    for (const [name, doc] of [
      ['the highest port', `${minimal}status:\n  listen: 127.0.0.1:65535\n`],
      ['port 65529', `${minimal}status:\n  listen: "[::1]:65529"\n`],
      ['a five-digit port below 60000', `${minimal}status:\n  listen: localhost:59999\n`],
      ['a size with a space before its unit', `${minimal}space:\n  reserveBytes: 1 GiB\n`],
      [
        'a dotted node name of 253 characters',
        `${minimal}nodeName: ${`${'a'.repeat(63)}.`.repeat(3)}${'b'.repeat(61)}\n`,
      ],
    ] as const) {
      t.ok(validate(parse(doc)), `the schema accepts ${name}: ${JSON.stringify(validate.errors)}`);
      t.doesNotThrow(() => parseConfig(doc), `and so does the agent: ${name}`);
    }
  },
);
