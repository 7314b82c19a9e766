// `bundle-agent collect`: what the archive holds, its bounds, and that no credential planted in
// the config, the kubeconfig, the state or the journal leaves the node.
import { chmod, mkdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import t from 'tap';
import {
  COLLECT_COMMAND_MS,
  COLLECT_DEADLINE_MS,
  MAX_COLLECT_ENTRY_BYTES,
  REDACTED,
  collect,
  parseConfig,
  redactDocument,
  redactText,
} from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, run, unpackArchive as unpack } from './fixtures.js';

const PEM = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  .privateKey.export({ format: 'pem', type: 'pkcs8' })
  .toString();
const B64 = randomBytes(96).toString('base64');
/** Every planted secret: none may appear anywhere in the archive. */
const SECRETS = {
  token: 'sha256~PLANTEDoauthTOKEN0123456789abcdefXYZ',
  jwt: `eyJhbGciOiJSUzI1NiJ9.${Buffer.from('{"sub":"planted-service-account"}').toString('base64url')}.c2lnbmF0dXJlLXBsYW50ZWQ`,
  keyData: B64,
  password: 'PLANTED-hunter2-password',
  bearer: 'PLANTEDbearerVALUEforTHEjournal',
  pemBody: PEM.split('\n')[1]!,
};

t.test('redaction by key name and by value shape', async (t) => {
  t.equal(redactText(`key:\n${PEM}`), `key:\n${REDACTED}\n`, 'a PEM block, whole');
  t.equal(redactText(`Authorization: Bearer ${SECRETS.bearer}`), `Authorization: ${REDACTED}`);
  t.equal(redactText(`login ${SECRETS.token} ok`), `login ${REDACTED} ok`, 'an OpenShift token');
  t.equal(redactText(SECRETS.jwt), REDACTED, 'a JWT');
  t.equal(
    redactText(`podman login --password=${SECRETS.password}`),
    `podman login --password=${REDACTED}`,
    'the flag kept, its value not',
  );
  t.equal(
    redactText(`podman pull --creds ${SECRETS.password} img`),
    `podman pull --creds ${REDACTED} img`,
    'a credential as the next argument',
  );
  t.equal(
    redactText('https://user:pw@registry.example/v2/'),
    `https:${REDACTED}registry.example/v2/`,
    'URL user info',
  );
  t.equal(redactText(`data: ${B64}`), `data: ${REDACTED}`, 'a long base64 run');
  const kept = `sha256:${'ab12'.repeat(16)} /var/lib/containers/storage/overlay-layers/layers.json quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:${'0f'.repeat(32)}`;
  t.equal(redactText(kept), kept, 'digests, paths and image names are kept');
  t.same(
    redactDocument({
      users: [{ name: 'n', user: { token: 'x', 'client-key-data': 'y', password: null } }],
      trust: { keys: ['/k.pub'] },
      auths: { 'q.io': { auth: 'z' } },
    }),
    {
      users: [
        { name: 'n', user: { token: REDACTED, 'client-key-data': REDACTED, password: null } },
      ],
      trust: { keys: ['/k.pub'] },
      auths: REDACTED,
    },
    'by key name, a mapping under one too; public key paths kept',
  );
});

interface Node {
  dir: string;
  root: string;
  config: string;
  bin: string;
}

async function node(t: any): Promise<Node> {
  const dir = await tmpdir(t, 'ob-collect-');
  const root = join(dir, 'root');
  const p = (s: string) => join(root, s);
  for (const d of [
    'etc/bundle-agent',
    'var/lib/bundle-agent/drop',
    'etc/containers/registries.conf.d',
    'etc/crio/crio.conf.d',
    'etc/containerd/certs.d/quay.io',
    'etc/containerd/certs.d/other.io',
    'media/usb',
  ])
    await mkdir(p(d), { recursive: true });
  const config = p('etc/bundle-agent/config.yaml');
  // the agent's config has no secret key of its own: one is planted in a command's argument
  await writeFile(
    config,
    `root: ${root}\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\nversion:\n  current: "1.0.0"\nstatus:\n  kubeconfig: /etc/kubernetes/kubeconfig\npreload:\n  method: command\n  command: [podman, pull, --creds=admin:${SECRETS.password}, --password=${SECRETS.password}]\n`,
  );
  await chmod(config, 0o600);
  await mkdir(p('etc/kubernetes'), { recursive: true });
  await writeFile(
    p('etc/kubernetes/kubeconfig'),
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: c',
      '  cluster:',
      '    server: https://api.cluster.example:6443',
      `    certificate-authority-data: ${B64}`,
      'users:',
      '- name: node',
      '  user:',
      `    token: ${SECRETS.token}`,
      `    client-key-data: ${B64}`,
      '- name: other',
      '  user:',
      `    client-key: |`,
      ...PEM.trim()
        .split('\n')
        .map((l) => `      ${l}`),
      '- name: sa',
      '  user:',
      '    exec:',
      '      env:',
      `      - {name: TOKEN, value: "${SECRETS.jwt}"}`,
      '',
    ].join('\n'),
  );
  await writeFile(
    p('var/lib/bundle-agent/status.json'),
    JSON.stringify({
      phase: 'Failed',
      message: `pull failed: Bearer ${SECRETS.bearer}`,
      history: [{ version: '1.1.0', outcome: 'Failed' }],
    }),
  );
  await writeFile(
    p('var/lib/bundle-agent/releases.json'),
    JSON.stringify({ releases: [{ version: '1.0.0', layout: '/var/lib/upgrade/1.0.0-amd64' }] }),
  );
  await writeFile(p('var/lib/bundle-agent/drop/update.bundle'), 'a bundle is no record');
  await writeFile(p('var/lib/bundle-agent/big.log'), 'x'.repeat(MAX_COLLECT_ENTRY_BYTES + 1000));
  await writeFile(
    p('etc/containers/registries.conf.d/offline-bundle-mirror.conf'),
    '# ours\n[[registry]]\nlocation = "quay.io"\n',
  );
  await writeFile(
    p('etc/containers/registries.conf.d/99-site.conf'),
    "# the site's own, not the agent's\n",
  );
  await writeFile(
    p('etc/crio/crio.conf.d/offline-bundle-pins.conf'),
    '[crio.image]\npinned_images = ["quay.io/a@sha256:00"]\n',
  );
  await writeFile(
    p('etc/containerd/certs.d/quay.io/hosts.toml'),
    '# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.\nserver = "https://quay.io"\n',
  );
  await writeFile(p('etc/containerd/certs.d/other.io/hosts.toml'), 'server = "https://other.io"\n');
  const bin = join(dir, 'bin');
  await mkdir(bin);
  return { dir, root, config, bin };
}

/** A journalctl stand-in on PATH: prints `script`'s output (the real one reads a journal this machine may lack). */
async function journal(n: Node, script: string): Promise<NodeJS.ProcessEnv> {
  await writeFile(join(n.bin, 'journalctl'), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return { ...process.env, PATH: `${n.bin}:${process.env.PATH}` };
}

t.test("bundle-agent collect: the archive's contents, and no secret in it", async (t) => {
  const n = await node(t);
  const env = await journal(
    n,
    `echo "agent started event=start"; echo "Authorization: Bearer ${SECRETS.bearer}"`,
  );
  const out = join(n.dir, 'support.tar.gz');
  const r = await run(AGENT, ['collect', '--config', n.config, '--output', out, '--json'], env);
  t.equal(r.code, 0, `exits 0 (${r.stderr})`);
  const res = JSON.parse(r.stdout) as { output: string; files: number; notes: string[] };
  t.equal(res.output, out);
  t.equal((await stat(out)).mode & 0o777, 0o600, 'the archive is for its owner only');
  const files = await unpack(out, join(n.dir, 'x'));
  t.equal(res.files, files.size, "the count printed is the archive's");
  // (runtime/crio-*: only where this machine has a crio on PATH; collect-broken.test.ts plants one)
  t.same(
    [...files.keys()].filter((f) => !f.startsWith('runtime/crio-')).sort(),
    [
      'NOTES.txt',
      'config-effective.json',
      'config.yaml',
      'disk.json',
      'drop-ins/certs.d/quay.io/hosts.toml',
      'drop-ins/crio.conf.d/offline-bundle-pins.conf',
      'drop-ins/registries.conf.d/offline-bundle-mirror.conf',
      'journal.txt',
      'kubeconfig.yaml',
      'media-mounts.txt',
      'os.txt',
      'runtime/journal.txt',
      'state/releases.json',
      'status.json',
      'version.txt',
    ],
    "the agent's own drop-ins and records only (not the site's, not a dropped bundle)",
  );
  t.match(files.get('version.txt'), /^bundle-agent \d+\.\d+\.\d+.*\nnode \S+\nruntime crio/);
  t.match(files.get('status.json'), /"phase": "Failed"[\s\S]*"history"/, 'status and history');
  t.match(
    files.get('kubeconfig.yaml'),
    /server: https:\/\/api\.cluster\.example:6443/,
    "the kubeconfig's shape stays",
  );
  t.match(files.get('journal.txt'), /agent started event=start/, 'the journal');
  t.match(
    files.get('disk.json'),
    /"imageStoreDir": \{\s*"path": "[^"]*var\/lib\/containers\/storage"[\s\S]*"kubeletThresholds"/,
    "disk space of the agent's paths",
  );
  t.match(
    files.get('NOTES.txt'),
    /state\/big\.log: .*big\.log is over 4194304 bytes/,
    'a file over the entry bound is left out, and said so',
  );
  t.match(
    files.get('NOTES.txt'),
    /runtime-images\.json: the runtime at .* did not list its images/,
    'an absent runtime is a note',
  );

  const all = gunzipSync(await readFile(out)).toString('latin1');
  for (const [what, secret] of Object.entries(SECRETS))
    t.notOk(all.includes(secret), `no ${what} anywhere in the archive`);
  t.ok(all.includes(REDACTED), 'redactions are marked');
});

t.test('bundle-agent collect: a journal that never ends is cut in size and in time', async (t) => {
  const n = await node(t);
  const out = join(n.dir, 'a.tar.gz');
  const cfg = parseConfig(await readFile(n.config, 'utf8'));
  const endless = await collect(cfg, {
    configPath: n.config,
    output: out,
    journal: ['yes', 'journal line'],
  });
  t.match(
    endless.notes.join('\n'),
    /journal\.txt: cut at 4194304 bytes/,
    `an endless journal is cut at ${MAX_COLLECT_ENTRY_BYTES} bytes`,
  );
  const started = Date.now();
  const silent = await collect(cfg, {
    configPath: n.config,
    output: out,
    journal: ['sh', '-c', 'echo first; exec sleep 60'],
  });
  t.ok(Date.now() - started < 60_000, 'a journal that hangs does not hold the archive');
  t.match(
    silent.notes.join('\n'),
    new RegExp(`journal\\.txt: sh gave no end within ${COLLECT_COMMAND_MS} ms`),
    'and says so',
  );
  const files = await unpack(out, join(n.dir, 'y'));
  t.equal(files.get('journal.txt'), 'first\n', 'what it wrote before is kept');
  const missing = await collect(cfg, {
    configPath: n.config,
    output: out,
    journal: [join(n.dir, 'no-journalctl')],
  });
  t.match(
    missing.notes.join('\n'),
    /journal\.txt: cannot run .*no-journalctl: .*ENOENT/,
    'no journalctl: a note, the rest is written',
  );
});

t.test(
  "bundle-agent collect: the runtime's image list (CRI-O stand-in answering the CRI ImageService)",
  async (t) => {
    const n = await node(t);
    const { startCrioStandin } = await import('../helpers/crio-standin.mjs');
    const crio = join(n.root, 'var/run/crio');
    await mkdir(crio, { recursive: true });
    await startCrioStandin(t, { dir: crio, pauseImage: 'registry.k8s.io/pause:3.9' });
    // the config's default criSocket, under root, is where the stand-in listens
    const cfg = parseConfig(await readFile(n.config, 'utf8'));
    const out = join(n.dir, 'c.tar.gz');
    const r = await collect(cfg, { configPath: n.config, output: out, journal: ['true'] });
    t.notMatch(r.notes.join('\n'), /runtime-images/, 'the runtime answered');
    const images = JSON.parse(
      (await unpack(out, join(n.dir, 'z'))).get('runtime-images.json')!,
    ) as { repoTags: string[]; pinned: boolean }[];
    t.ok(Array.isArray(images), 'the list as the CRI gives it');
    t.ok(
      images.every((i) => typeof i.pinned === 'boolean'),
      "with each image's pinned flag",
    );
  },
);

t.test(
  "bundle-agent collect: a symlink is collected as its target's name, never followed",
  async (t) => {
    const n = await node(t);
    const p = (s: string) => join(n.root, s);
    // outside the agent's directories: a shadow file, a directory of look-alike drop-ins, a certs.d host
    const outside = join(n.dir, 'outside');
    const SHADOW_SECRET = 'PLANTEDshadowSECRET7f3a';
    const shadow = join(outside, 'shadow');
    await mkdir(join(outside, 'dropins'), { recursive: true });
    await mkdir(join(outside, 'host'));
    await writeFile(shadow, `root:$6$salt$${SHADOW_SECRET}:19000:0:99999:7:::\n`);
    await writeFile(join(outside, 'dropins/offline-bundle-pins.conf'), `# ${SHADOW_SECRET}\n`);
    await writeFile(
      join(outside, 'host/hosts.toml'),
      `# Managed by offline-bundle: written by bundle-agent, removed when the upgrade completes. Do not edit.\n# ${SHADOW_SECRET}\n`,
    );
    const links: [string, string][] = [
      ['var/lib/bundle-agent/status.json', shadow],
      ['etc/kubernetes/kubeconfig', shadow],
      ['var/lib/bundle-agent/linked.json', shadow],
      ['etc/containers/registries.conf.d/offline-bundle-evil.conf', shadow],
      ['etc/crio/crio.conf.d', join(outside, 'dropins')],
      ['etc/containerd/certs.d/evil.io', join(outside, 'host')],
      ['etc/containerd/certs.d/quay.io/hosts.toml', join(outside, 'host/hosts.toml')],
    ];
    for (const [at, target] of links) {
      await rm(p(at), { recursive: true, force: true });
      await symlink(target, p(at));
    }
    const out = join(n.dir, 's.tar.gz');
    const r = await collect(parseConfig(await readFile(n.config, 'utf8')), {
      configPath: n.config,
      output: out,
      journal: ['true'],
    });
    const files = await unpack(out, join(n.dir, 'x'));
    for (const [entry, target] of [
      ['status.json', shadow],
      ['kubeconfig.yaml', shadow],
      ['state/linked.json', shadow],
      ['drop-ins/registries.conf.d/offline-bundle-evil.conf', shadow],
      ['drop-ins/crio.conf.d', join(outside, 'dropins')],
      ['drop-ins/certs.d/evil.io', join(outside, 'host')],
      ['drop-ins/certs.d/quay.io/hosts.toml', join(outside, 'host/hosts.toml')],
    ] as const) {
      t.equal(
        files.get(entry),
        `symlink → ${target}\n`,
        `${entry}: the link's target named, not followed`,
      );
    }
    t.match(
      r.notes.join('\n'),
      /status\.json: .*status\.json is a symlink to .*outside\/shadow: not followed/,
      'and noted',
    );
    const all = gunzipSync(await readFile(out)).toString('latin1');
    for (const secret of [
      SHADOW_SECRET,
      Buffer.from(SHADOW_SECRET).toString('base64'),
      Buffer.from(`$6$salt$${SHADOW_SECRET}`).toString('base64'),
      'root:$6$',
    ]) {
      t.notOk(
        all.includes(secret),
        `${secret.slice(0, 12)}…: nothing of the files outside the agent's directories in the archive`,
      );
    }
  },
);

t.test(
  'bundle-agent collect: the upgrade directory by name and size (part spool, partial staging), never its bytes',
  async (t) => {
    const n = await node(t);
    const up = join(n.root, 'var/lib/upgrade');
    await mkdir(join(up, 'parts-spool'), { recursive: true });
    await writeFile(
      join(up, 'parts-spool', 'spool.json'),
      JSON.stringify({ base: 'u.bundle', count: 3, parts: [{ n: 1, size: 6_000_000 }] }),
    );
    await writeFile(
      join(up, 'parts-spool', 'u.bundle.part-001-of-003'),
      Buffer.alloc(6_000_000, 7),
    );
    await mkdir(join(up, '1.1.0-amd64.partial', 'blobs', 'sha256'), { recursive: true });
    await writeFile(
      join(up, '1.1.0-amd64.partial', 'resume.json'),
      `{"bundleJson":"sha256:${'ab'.repeat(32)}"}\n`,
    );
    await writeFile(
      join(up, '1.1.0-amd64.partial', 'blobs', 'sha256', 'cd'),
      Buffer.alloc(5_000_000, 8),
    );
    const out = join(n.dir, 'upgrade.tar.gz');
    const r = await run(
      AGENT,
      ['collect', '--config', n.config, '--output', out],
      await journal(n, 'true'),
    );
    t.equal(r.code, 0, r.stderr);
    const files = await unpack(out, join(n.dir, 'y'));
    const listing = JSON.parse(files.get('upgrade-dir.json')!) as {
      entries: { name: string; type: string; bytes: number }[];
    };
    const byName = new Map(listing.entries.map((e) => [e.name, e]));
    t.ok(byName.get('parts-spool')!.bytes >= 6_000_000, 'the spool, with its size');
    t.ok(
      byName.get('1.1.0-amd64.partial')!.bytes >= 5_000_000,
      'the partial staging, with its size',
    );
    t.match(
      files.get('upgrade-dir/parts-spool/spool.json'),
      /"base": "u\.bundle"/,
      "the spool's index",
    );
    t.match(
      files.get('upgrade-dir/1.1.0-amd64.partial/resume.json'),
      /"bundleJson": "sha256:abab/,
      "the marker naming the partial's bundle",
    );
    t.ok(
      gunzipSync(await readFile(out)).length < 1_000_000,
      'no part or blob bytes in the archive',
    );
  },
);

t.test(
  'bundle-agent collect: one deadline for the whole; what is not collected by then is named, the archive written',
  async (t) => {
    const n = await node(t);
    const out = join(n.dir, 'late.tar.gz');
    const cfg = parseConfig(await readFile(n.config, 'utf8'));
    const started = Date.now();
    // each command alone is within its own bound (COLLECT_COMMAND_MS): together they were not
    await collect(cfg, {
      configPath: n.config,
      output: out,
      journal: ['sleep', '60'],
      runtimeJournal: ['true'],
      deadlineMs: 2000,
    });
    const ms = Date.now() - started;
    t.ok(
      ms < COLLECT_COMMAND_MS - 2000,
      `written in ${ms} ms, at the deadline (not after the journal's own ${COLLECT_COMMAND_MS} ms)`,
    );
    t.ok(COLLECT_DEADLINE_MS >= 60_000, 'the real deadline leaves room for every command');
    const files = await unpack(out, join(n.dir, 'z'));
    t.ok(
      files.has('version.txt') && files.has('config.yaml') && files.has('status.json'),
      'what was collected before is in the archive',
    );
    t.notOk(files.has('journal.txt') || files.has('disk.json'), 'nothing after the deadline');
    t.match(
      files.get('NOTES.txt'),
      /not collected: journal\.txt, os\.txt, runtime\/, runtime\/journal\.txt, disk\.json, media-mounts\.txt, upgrade-dir\.json: collect's deadline of 2 s passed/,
    );
  },
);
