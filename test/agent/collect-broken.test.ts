// `bundle-agent collect` when support needs it most (issue #39 item 5): a config that does not
// parse or does not validate still gives an archive, saying what is broken in the words
// `bundle-agent run` uses, with the broken file in it redacted; the runtime as it runs (version,
// config) and the OS, or their absence named; no journalctl (the OpenShift image) named with the
// journal files mounted; media-mounts.txt says why it is empty.
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { collect, parseConfig } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, run, unpackArchive as unpack } from './fixtures.js';

const PASSWORD = 'PLANTED-broken-config-pw-7Qx2';
const RUNTIME_SECRET = 'PLANTED-containerd-registry-pw-9Zk4';
const CRIO_CONF = '[crio.image]\npause_image = "registry.k8s.io/pause:3.9"\n';

interface Node {
  dir: string;
  root: string;
  config: string;
  env: NodeJS.ProcessEnv;
}

/**
 * A node root with a config the test writes, and a PATH holding only stand-ins for the
 * runtimes' CLIs (no journalctl: as in the OpenShift agent image). crio's daemon is not
 * running (`crio status config` fails), so its config comes from `crio config`.
 */
async function node(t: any, configText: string): Promise<Node> {
  const dir = await tmpdir(t, 'ob-collect-broken-');
  const root = join(dir, 'root');
  for (const d of ['etc/bundle-agent', 'var/lib/bundle-agent', 'media', 'var/log/journal/0123abcd'])
    await mkdir(join(root, d), { recursive: true });
  const config = join(root, 'etc/bundle-agent/config.yaml');
  await writeFile(config, configText.replaceAll('ROOT', root));
  await chmod(config, 0o600);
  await writeFile(join(root, 'etc/os-release'), 'NAME="Test OS"\nVERSION_ID="9.9"\n');
  const bin = join(dir, 'bin');
  await mkdir(bin);
  await writeFile(
    join(bin, 'crio'),
    `#!/bin/sh
case "$1" in
  --version) echo "crio version 1.30.4-standin";;
  status) echo "connect: no such file or directory: is crio running?" >&2; exit 1;;
  config) printf '${CRIO_CONF}';;
esac
`,
    { mode: 0o755 },
  );
  await writeFile(
    join(bin, 'containerd'),
    `#!/bin/sh
case "$1" in
  --version) echo "containerd github.com/containerd/containerd 1.7.24~standin";;
  config) printf 'version = 2\\n[plugins."io.containerd.grpc.v1.cri".registry]\\n  config_path = ""\\n[plugins."io.containerd.grpc.v1.cri".registry.configs."r.io".auth]\\n  password = "${RUNTIME_SECRET}"\\n';;
esac
`,
    { mode: 0o755 },
  );
  return { dir, root, config, env: { ...process.env, PATH: bin } };
}

/** The lines `bundle-agent run` stops with on this config (it exits before it touches anything). */
async function runRefusal(t: any, n: Node): Promise<string[]> {
  const r = await run(AGENT, ['run', '--config', n.config], n.env);
  t.equal(r.code, 1, 'bundle-agent run refuses the config');
  const lines = r.stderr.split('\n').filter((l) => l.startsWith('bundle-agent: InvalidConfig: '));
  t.ok(lines.length > 0, `run names the problem (${r.stderr})`);
  return lines;
}

/** Runs collect on `n` and checks what every broken-config archive says; returns its files. */
async function collectBroken(
  t: any,
  n: Node,
  args: string[] = [],
): Promise<{ files: Map<string, string>; refusal: string[]; bytes: string }> {
  const refusal = await runRefusal(t, n);
  const out = join(n.dir, 'support.tar.gz');
  const r = await run(AGENT, ['collect', '--config', n.config, '--output', out, ...args], n.env);
  t.equal(r.code, 0, `collect writes the archive and exits 0 (${r.stderr})`);
  t.match(
    r.stdout,
    new RegExp(
      `^wrote ${out.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} .*the config is BROKEN.*CONFIG-ERROR\\.txt`,
    ),
    'stdout: written, and the config is broken',
  );
  for (const line of refusal)
    t.ok(r.stderr.includes(line), `stderr repeats run's line: ${line.slice(0, 90)}`);
  const files = await unpack(out, join(n.dir, 'x'));
  for (const line of refusal)
    t.ok(
      files.get('CONFIG-ERROR.txt')?.includes(line),
      `CONFIG-ERROR.txt holds run's exact line: ${line.slice(0, 90)}`,
    );
  t.match(
    files.get('version.txt'),
    /\nconfig BROKEN: .*CONFIG-ERROR\.txt\n/,
    'version.txt says so too',
  );
  t.match(files.get('NOTES.txt'), /did not load: CONFIG-ERROR\.txt says why/, 'and NOTES.txt');
  t.ok(
    files.has('config-assumed.json') && !files.has('config-effective.json'),
    'what was assumed is not called effective',
  );
  const bytes = gunzipSync(await readFile(out)).toString('latin1');
  t.notOk(
    bytes.includes(PASSWORD),
    'the password planted in the broken config is nowhere in the archive',
  );
  t.notOk(bytes.includes(RUNTIME_SECRET), "nor the one in containerd's config dump");
  return { files, refusal, bytes };
}

/** The runtime facts and their absences, the OS, no journalctl, and media-mounts.txt's reason. */
function checkNodeFacts(t: any, n: Node, files: Map<string, string>, runtimes: string[]): void {
  const notes = files.get('NOTES.txt')!;
  if (runtimes.includes('crio')) {
    t.equal(
      files.get('runtime/crio-version.txt'),
      'crio version 1.30.4-standin\n',
      'crio --version',
    );
    t.equal(
      files.get('runtime/crio-config.toml'),
      CRIO_CONF,
      'crio config, the daemon not answering crio status config',
    );
    t.match(
      notes,
      /runtime\/crio-config\.toml: crio status --socket \S+crio\.sock config: exited 1: connect: no such file/,
      'why crio status config gave nothing',
    );
  }
  if (runtimes.includes('containerd')) {
    t.match(
      files.get('runtime/containerd-version.txt'),
      /^containerd github\.com\/containerd\/containerd 1\.7\.24~standin\n$/,
      'containerd --version',
    );
    t.match(
      files.get('runtime/containerd-config.toml'),
      /config_path = ""[\s\S]*password = "<redacted>"/,
      'containerd config dump, its credential redacted',
    );
  } else {
    t.notOk(
      files.has('runtime/containerd-version.txt'),
      'the runtime the config names is the one asked',
    );
  }
  t.match(
    notes,
    /runtime\/cri-status\.json: the runtime at \S+ gave no status/,
    'no CRI answer: named',
  );
  t.match(
    files.get('os.txt'),
    new RegExp(
      `^kernel Linux \\S+ [\\s\\S]*\\nboot id [0-9a-f-]{36}\\n[\\s\\S]*${n.root}/etc/os-release \\(the node\\):\\nNAME="Test OS"`,
    ),
    "kernel, boot id, the node's os-release",
  );
  t.match(
    notes,
    /journal\.txt: cannot run journalctl: not found on PATH .*no journal is collected; the journal's files are mounted at [^\n]*\/root\/var\/log\/journal \(1 entry\)/,
    'no journalctl: said, with where the journal is mounted',
  );
  t.match(
    notes,
    /runtime\/journal\.txt: cannot run journalctl: not found on PATH/,
    'the runtime journal too',
  );
  t.notOk(files.has('journal.txt') || files.has('runtime/journal.txt'), 'no empty journal files');
  t.match(
    files.get('media-mounts.txt'),
    new RegExp(
      `^# no removable media mounted: none of the \\d+ mounts in /proc/self/mountinfo is under media\\.roots and media\\.watchDirs: ${n.root}/media, `,
    ),
    'media-mounts.txt says why it is empty, and where it looked',
  );
}

t.test(
  'collect with a config that is not YAML: the archive, the error run gives, the file redacted',
  async (t) => {
    const n = await node(
      t,
      `root: ROOT\ntrust:\n  keys: [/k.pub\npreload:\n  command: [podman, login, --password=${PASSWORD}]\n  password: ${PASSWORD}\n`,
    );
    const { files, refusal } = await collectBroken(t, n);
    t.match(refusal.join('\n'), /config\.yaml: not valid YAML: /, 'the refusal is the YAML error');
    t.match(
      files.get('config.yaml'),
      /keys: \[\/k\.pub\npreload:/,
      'config.yaml is the file as it is',
    );
    t.match(
      files.get('config.yaml'),
      /--password=<redacted>[\s\S]*password: <redacted>/,
      'with its credentials redacted',
    );
    t.match(
      files.get('CONFIG-ERROR.txt'),
      new RegExp(
        `collected with root ${n.root} \\(the config's\\), the defaults for every setting`,
      ),
      'the root its "root:" line gives, defaults for the rest',
    );
    t.match(files.get('version.txt'), new RegExp(`\\nroot ${n.root}\\n`));
    checkNodeFacts(t, n, files, ['crio', 'containerd']);
  },
);

t.test(
  'collect with a config that breaks the schema: the valid settings kept, each problem named',
  async (t) => {
    const n = await node(
      t,
      `root: ROOT\nruntime: crio\ntrust:\n  keys: [/k.pub]\nmedia:\n  roots: /media\nbogus: 1\npaths:\n  upgradeDir: /var/lib/my-upgrade\npreload:\n  method: command\n  command: [podman, pull, --creds=admin:${PASSWORD}]\n`,
    );
    const { files, refusal } = await collectBroken(t, n, ['--root', join(n.dir, 'elsewhere')]);
    t.equal(refusal.length, 2, 'run names both problems');
    t.match(refusal.join('\n'), /bogus: unknown key[\s\S]*media\.roots: must be a list/);
    t.match(
      files.get('CONFIG-ERROR.txt'),
      /given with --root\), the config's valid settings and the defaults for bogus, media\.roots/,
      'what was assumed, and why',
    );
    const assumed = JSON.parse(files.get('config-assumed.json')!) as {
      root: string;
      paths: { upgradeDir: string };
      media: { roots: string[] };
    };
    t.equal(assumed.root, join(n.dir, 'elsewhere'), "--root where the config's is not wanted");
    t.equal(
      assumed.paths.upgradeDir,
      join(n.dir, 'elsewhere/var/lib/my-upgrade'),
      'a valid setting of the config is kept',
    );
    t.same(
      assumed.media.roots,
      ['media', 'run/media', 'mnt'].map((d) => join(n.dir, 'elsewhere', d)),
      'the refused one is the default',
    );
    t.match(
      files.get('config.yaml'),
      /bogus: 1[\s\S]*--creds=<redacted>/,
      'config.yaml as it is, redacted',
    );
  },
);

t.test(
  "collect with a config that breaks the schema, with no --root: the config's root and its runtime only",
  async (t) => {
    const n = await node(
      t,
      `root: ROOT\nruntime: crio\ntrust:\n  keys: [/k.pub]\nversion:\n  fromCluster: true\n`,
    );
    const { files, refusal } = await collectBroken(t, n);
    t.match(
      refusal.join('\n'),
      /version\.fromCluster: needs status\.kubeconfig/,
      'a rule between keys',
    );
    t.match(
      files.get('CONFIG-ERROR.txt'),
      /root \S+ \(the config's\), the config's valid settings and the defaults for version\.fromCluster/,
    );
    checkNodeFacts(t, n, files, ['crio']);
  },
);

t.test(
  'collect on a good config: runtime facts from the runtime it names, a /proc that cannot be read said so',
  async (t) => {
    const n = await node(t, 'root: ROOT\nruntime: containerd\ntrust:\n  keys: [/k.pub]\n');
    const out = join(n.dir, 'good.tar.gz');
    const r = await run(AGENT, ['collect', '--config', n.config, '--output', out, '--json'], n.env);
    t.equal(r.code, 0, r.stderr);
    t.notOk('configError' in JSON.parse(r.stdout), 'no config error for a config that loads');
    const files = await unpack(out, join(n.dir, 'g'));
    t.ok(files.has('config-effective.json') && !files.has('CONFIG-ERROR.txt'));
    t.match(files.get('runtime/containerd-version.txt'), /1\.7\.24~standin/);
    t.notOk(files.has('runtime/crio-version.txt'), 'crio is not asked on a containerd node');
    const noproc = join(n.dir, 'noproc.tar.gz');
    const res = await collect(parseConfig(await readFile(n.config, 'utf8')), {
      configPath: n.config,
      output: noproc,
      journal: ['true'],
      runtimeJournal: ['true'],
      mountinfo: join(n.dir, 'no-proc/self/mountinfo'),
    });
    t.match(res.notes.join('\n'), /media-mounts\.txt: .*no-proc\/self\/mountinfo: ENOENT/);
    t.match(
      (await unpack(noproc, join(n.dir, 'p'))).get('media-mounts.txt'),
      /^# no mounts: \S+no-proc\/self\/mountinfo could not be read \(ENOENT.*\); looked under media\.roots and media\.watchDirs: \S+\/media, /,
      'an unreadable /proc: said, with the roots',
    );
  },
);
