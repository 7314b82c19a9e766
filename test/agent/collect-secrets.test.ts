// `bundle-agent collect` against the secrets a node really holds (issue #44 item 3): every kind
// of secret the hostile review planted (and more), in the places collect reads (state files that
// do not parse, a kubeconfig that does not parse, the config, the journal), none left in the
// archive; the key names around them kept; NOTES.txt says what was redacted.
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import t from 'tap';
import { REDACTED, collect, parseConfig, redactText } from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';
import { unpackArchive as unpack } from './fixtures.js';

/** MAX_COLLECT_YAML_PARSE_BYTES (agent/src/collect-document.ts): YAML larger gets the line rules only. */
const MAX_COLLECT_YAML_PARSE_BYTES = 64 * 1024;
const hex = (n: number) => randomBytes(n).toString('hex');
const alnum = (n: number) =>
  randomBytes(n * 2)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, '')
    .slice(0, n);
const SSH_KEY = generateKeyPairSync('ed25519')
  .privateKey.export({ format: 'pem', type: 'pkcs8' })
  .toString()
  .replace(/PRIVATE KEY/g, 'OPENSSH PRIVATE KEY');

/** Each planted secret value by kind; none may appear in the archive. */
const S = {
  multiDocToken: `mdtok-${alnum(20)}`,
  multiDocPassword: `mdpw-${alnum(20)}`,
  brokenYamlPassword: `bypw-${alnum(20)}`,
  brokenYamlBlock: `byblock-${alnum(20)}`,
  jsonPassword: `jpw-${alnum(20)}`,
  escapedJsonToken: `ejtok-${alnum(20)}`,
  xAuthToken: `xat-${alnum(20)}`,
  registryPassword: `regpw-${alnum(20)}`,
  srcCreds: `srccreds-${alnum(20)}`,
  passwordFlag: `pwflag-${alnum(20)}`,
  textPassword: `txtpw-${alnum(20)}`,
  hex64: hex(32),
  github: `ghp_${alnum(36)}`,
  awsKeyId: `AKIA${alnum(16)
    .toUpperCase()
    .replace(/[^A-Z0-9]/g, 'Q')}`,
  awsSecret: `${alnum(30)}/${alnum(9)}`,
  awsSecretIni: `${alnum(40)}`,
  k3s: `K10${hex(32)}::server:${hex(16)}`,
  basicAuth: Buffer.from(`bob:${alnum(12)}`).toString('base64'),
  tomlPassword: `tomlpw-${alnum(20)}`,
  shellPassword: `shpw-${alnum(20)}`,
  dockerLogin: `dockpw-${alnum(20)}`,
  curlUser: `curlpw-${alnum(20)}`,
  urlUserInfo: `urlpw-${alnum(20)}`,
  cookie: `cookie-${alnum(20)}`,
  gitlab: `glpat-${alnum(20)}`,
  slack: `xoxb-${hex(6)}-${alnum(24)}`,
  google: `AIza${alnum(35)}`,
  npm: `npm_${alnum(36)}`,
  sshKeyBody: SSH_KEY.split('\n')[1]!,
  kubeToken: `kubetok-${alnum(20)}`,
  kubeKeyData: randomBytes(48).toString('base64'),
  brokenJsonSecret: `bjsec-${alnum(20)}`,
  pythonRepr: `pyrepr-${alnum(20)}`,
  configCreds: `cfgcreds-${alnum(20)}`,
};

/** What a node's journal of the agent (and of a helper it ran) could say. */
const JOURNAL = [
  'Dec 06 10:00:00 node1 bundle-agent[100]: agent started event=start',
  `Dec 06 10:00:01 node1 bundle-agent[100]: {"level":"error","msg":"login failed","user":"bob","password":"${S.jsonPassword}"}`,
  `Dec 06 10:00:02 node1 bundle-agent[100]: {"msg":"{\\"token\\":\\"${S.escapedJsonToken}\\",\\"registry\\":\\"quay.io\\"}"}`,
  `Dec 06 10:00:03 node1 bundle-agent[100]: request headers: X-Auth-Token: ${S.xAuthToken}`,
  `Dec 06 10:00:04 node1 bundle-agent[100]: env REGISTRY_PASSWORD=${S.registryPassword} REGISTRY=quay.io`,
  `Dec 06 10:00:05 node1 bundle-agent[100]: running skopeo copy --src-creds admin:${S.srcCreds} docker://quay.io/a oci:/tmp/a`,
  `Dec 06 10:00:06 node1 bundle-agent[100]: running podman login --password ${S.passwordFlag} quay.io`,
  `Dec 06 10:00:07 node1 bundle-agent[100]: joined with token ${S.hex64}`,
  `Dec 06 10:00:08 node1 bundle-agent[100]: git clone with ${S.github}`,
  `Dec 06 10:00:09 node1 bundle-agent[100]: aws creds ${S.awsKeyId} ${S.awsSecret}`,
  `Dec 06 10:00:10 node1 k3s[7]: K3S_TOKEN value ${S.k3s}`,
  `Dec 06 10:00:11 node1 bundle-agent[100]: Authorization: Basic ${S.basicAuth}`,
  `Dec 06 10:00:12 node1 bundle-agent[100]: docker login -u bob -p ${S.dockerLogin} registry.example`,
  `Dec 06 10:00:13 node1 bundle-agent[100]: curl -u bob:${S.curlUser} https://registry.example/v2/`,
  `Dec 06 10:00:14 node1 bundle-agent[100]: pulling from https://bob:${S.urlUserInfo}@registry.example/v2/`,
  `Dec 06 10:00:15 node1 bundle-agent[100]: Cookie: session=${S.cookie}; theme=dark`,
  `Dec 06 10:00:16 node1 bundle-agent[100]: tokens ${S.gitlab} ${S.slack} ${S.google} ${S.npm}`,
  `Dec 06 10:00:17 node1 bundle-agent[100]: {'user': 'bob', 'password': '${S.pythonRepr}'}`,
  `Dec 06 10:00:18 node1 bundle-agent[100]: pulled quay.io/a@sha256:${'0f'.repeat(32)} into /var/lib/containers/storage/overlay/${'ab'.repeat(32)}`,
  'Dec 06 10:00:19 node1 bundle-agent[100]: pull failed: unauthorized: authentication required',
].join('\n');

async function plantNode(t: any) {
  const dir = await tmpdir(t, 'ob-collect-secrets-');
  const root = join(dir, 'root');
  const p = (s: string) => join(root, s);
  for (const d of ['etc/bundle-agent', 'var/lib/bundle-agent', 'etc/kubernetes'])
    await mkdir(p(d), { recursive: true });
  const config = p('etc/bundle-agent/config.yaml');
  await writeFile(
    config,
    `root: ${root}\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\nversion:\n  current: "1.0.0"\nstatus:\n  kubeconfig: /etc/kubernetes/kubeconfig\npreload:\n  method: command\n  command: [skopeo, copy, --src-creds, "admin:${S.configCreds}", docker://a, oci:/b]\n`,
  );
  await chmod(config, 0o600);
  // a kubeconfig that does not parse (a tab in its indentation): only the line rules see it
  await writeFile(
    p('etc/kubernetes/kubeconfig'),
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: c',
      '  cluster:',
      '    server: https://api.cluster.example:6443',
      'users:',
      '- name: node',
      '  user:',
      `\ttoken: ${S.kubeToken}`,
      `    client-key-data: ${S.kubeKeyData}`,
      '  bad: [unclosed',
      '',
    ].join('\n'),
  );
  const state = p('var/lib/bundle-agent');
  await writeFile(
    join(state, 'multi.yaml'),
    `---\nnode: node1\ntoken: ${S.multiDocToken}\n---\nregistry: quay.io\npassword: ${S.multiDocPassword}\n`,
  );
  await writeFile(
    join(state, 'broken.yaml'),
    `registry: quay.io\npassword: ${S.brokenYamlPassword}\nsecret: |\n  ${S.brokenYamlBlock}\n  second line\nafter: kept\n  : : [bad\n`,
  );
  await writeFile(
    join(state, 'site.conf'),
    `# the site's notes\nuser: bob\npassword: ${S.textPassword}\n[aws]\naws_access_key_id = ${S.awsKeyId}\naws_secret_access_key = ${S.awsSecretIni}\n`,
  );
  await writeFile(
    join(state, 'mirror.toml'),
    `[[registry]]\nlocation = "quay.io"\npassword = "${S.tomlPassword}"\n`,
  );
  await writeFile(
    join(state, 'env.sh'),
    `export REGISTRY=quay.io\nexport DB_PASSWORD='${S.shellPassword}'\n`,
  );
  await writeFile(join(state, 'id_ed25519'), SSH_KEY);
  await writeFile(
    join(state, 'cut.json'),
    `{"registry": "quay.io", "secret": "${S.brokenJsonSecret}", "more": [1, 2`,
  );
  const journal = join(dir, 'journal.txt');
  await writeFile(journal, `${JOURNAL}\n`);
  return { dir, root, config, journal };
}

t.test(
  `collect: ${Object.keys(S).length} planted secrets in every shape, none in the archive; key names kept`,
  async (t) => {
    const n = await plantNode(t);
    const out = join(n.dir, 'support.tar.gz');
    await collect(parseConfig(await readFile(n.config, 'utf8')), {
      configPath: n.config,
      output: out,
      journal: ['cat', n.journal],
    });
    const files = await unpack(out, join(n.dir, 'x'));
    t.ok(
      [
        'state/multi.yaml',
        'state/broken.yaml',
        'state/site.conf',
        'state/mirror.toml',
        'state/env.sh',
        'state/cut.json',
        'kubeconfig.yaml',
        'journal.txt',
      ].every((f) => files.has(f)),
      'every planted file was collected',
    );
    const all = gunzipSync(await readFile(out)).toString('latin1');
    const leaked = Object.entries(S)
      .filter(([, v]) => all.includes(v))
      .map(([k]) => k);
    t.same(leaked, [], `none of ${Object.keys(S).length} planted secrets in the archive`);
    for (const [kind, v] of Object.entries(S))
      t.notOk(all.includes(v), `${kind}: not in the archive`);

    const j = files.get('journal.txt')!;
    for (const kept of [
      '"password":"<redacted>"',
      'X-Auth-Token: <redacted>',
      'REGISTRY_PASSWORD=<redacted>',
      '--src-creds <redacted>',
      '--password <redacted>',
      'REGISTRY=quay.io',
      '\\"registry\\":\\"quay.io\\"',
      'Cookie: <redacted>',
      "'password': '<redacted>'",
    ]) {
      t.ok(j.includes(kept), `journal: ${kept}`);
    }
    t.ok(
      j.includes(`quay.io/a@sha256:${'0f'.repeat(32)}`) && j.includes(`overlay/${'ab'.repeat(32)}`),
      'digests and layer paths kept',
    );
    t.ok(
      j.includes('pull failed: unauthorized: authentication required'),
      'an error message that names auth is kept',
    );
    t.match(
      files.get('state/multi.yaml'),
      /node: node1\ntoken: <redacted>\n---\nregistry: quay.io\npassword: <redacted>/,
      'a multi-document YAML: key names and the rest kept',
    );
    t.match(
      files.get('state/broken.yaml'),
      /registry: quay.io\npassword: <redacted>\nsecret: \|\n {2}<redacted>\nafter: kept/,
      'a YAML that does not parse: by line, a block under a secret key too',
    );
    t.match(
      files.get('state/site.conf'),
      /user: bob\npassword: <redacted>\n\[aws\]\naws_access_key_id = <redacted>\naws_secret_access_key = <redacted>/,
    );
    t.match(files.get('state/mirror.toml'), /location = "quay.io"\npassword = "<redacted>"/);
    t.match(files.get('state/env.sh'), /export REGISTRY=quay.io\nexport DB_PASSWORD='<redacted>'/);
    t.match(files.get('state/cut.json'), /"registry": "quay.io", "secret": "<redacted>"/);
    t.match(
      files.get('kubeconfig.yaml'),
      /server: https:\/\/api\.cluster\.example:6443[\s\S]*token: <redacted>[\s\S]*client-key-data: <redacted>/,
    );
    t.match(
      files.get('config.yaml'),
      /- --src-creds\n\s+- <redacted>\n\s+- docker:\/\/a/,
      'the config: the flag kept, its value not',
    );
    t.match(files.get('config-effective.json'), /"--src-creds",\s+"<redacted>",\s+"docker:\/\/a"/);
    const notes = files.get('NOTES.txt')!;
    t.match(
      notes,
      /redacted \(each value replaced by <redacted>; by entry, how many by which rule\):/,
      'NOTES.txt says what was redacted',
    );
    t.match(notes, /journal\.txt: .*\d+ × JSON key/);
    t.match(notes, /state\/multi\.yaml: 2 × key: value/);
    t.notOk(
      Object.values(S).some((v) => notes.includes(v)),
      'the notes name rules and counts, never a value',
    );
  },
);

t.test('line rules: formats the review named, and what must stay', async (t) => {
  const cases: [string, string][] = [
    ['{"password":"a1","user":"b"}', '{"password":"<redacted>","user":"b"}'],
    ['X-Auth-Token: a1', 'X-Auth-Token: <redacted>'],
    ['REGISTRY_PASSWORD=a1 REGISTRY=q', 'REGISTRY_PASSWORD=<redacted> REGISTRY=q'],
    [
      'skopeo copy --src-creds user:a1 --dest-creds=u:a2 x',
      'skopeo copy --src-creds <redacted> --dest-creds=<redacted> x',
    ],
    ['podman login --password-stdin quay.io', 'podman login --password-stdin quay.io'],
    ['  password: a1 # note', '  password: <redacted>'],
    ['clientSecret: a1', 'clientSecret: <redacted>'],
    ['private_key = "a1"', 'private_key = "<redacted>"'],
    ['certificate-authority: /etc/ca.crt', 'certificate-authority: /etc/ca.crt'],
    ['unauthorized: authentication required', 'unauthorized: authentication required'],
    ['token_count: 3 tokens', 'token_count: <redacted>'],
    [`sha256:${'ab'.repeat(32)}`, `sha256:${'ab'.repeat(32)}`],
    [`{"id": "${'cd'.repeat(32)}"}`, `{"id": "${'cd'.repeat(32)}"}`],
    [`tok ${'cd'.repeat(32)}`, `tok ${REDACTED}`],
    // what the document rule catches, for YAML too large to parse
    ['"password": a1\n\'token\': a2', '"password": <redacted>\n\'token\': <redacted>'],
    ['{"password": "a1", "user": "b"}', '{"password": "<redacted>", "user": "b"}'],
    ['"password": "a1\n  a2"\nuser: b', '"password": <redacted>\n  <redacted>\nuser: b'],
    [
      '- password: a1\n   a2\n\n   a3\n  user: b\n',
      '- password: <redacted>\n    <redacted>\n  user: b\n',
    ],
    ['tokens:\n- a1\n- a2\nuser: b', 'tokens:\n  <redacted>\nuser: b'],
    ['token: !!binary |\n  a1\nuser: b', 'token: <redacted>\n  <redacted>\nuser: b'],
    [
      'htpasswd: bob:a1\nsessionId: a2\nKUBETOKEN=a3',
      'htpasswd: <redacted>\nsessionId: <redacted>\nKUBETOKEN=<redacted>',
    ],
  ];
  for (const [input, want] of cases) t.equal(redactText(input), want, input);
});

t.test('redaction stays linear: 4 MiB of whitespace, of one token, of quotes', async (t) => {
  for (const [what, text] of [
    ['whitespace after a secret key', `token:${' '.repeat(4 << 20)}x`],
    ['dotted token', 'a.'.repeat(2 << 20)],
    ['JWT-like run', 'eyJ-'.repeat(1 << 20)],
    ['flags', '--p '.repeat(1 << 20)],
    ['hex', 'a'.repeat(4 << 20)],
    ['assignments', 'a='.repeat(2 << 20)],
    ['quoted keys', '"a":'.repeat(1 << 20)],
    ['quoted secret keys, strings unclosed', '"token": "'.repeat(400_000)],
    ['quoted secret keys, quotes mixed', `"token": 'a "token": "b '`.repeat(160_000)],
    [
      'secret keys, each indented deeper',
      Array.from({ length: 200_000 }, (_, i) => `${' '.repeat(i % 20)}token: a`).join('\n'),
    ],
    ['a secret key, then blank lines', `token: a\n${' \n'.repeat(2 << 20)}b`],
  ] as const) {
    const started = Date.now();
    redactText(text);
    const ms = Date.now() - started;
    t.ok(ms < 15_000, `${what}: ${text.length} bytes redacted in ${ms} ms`);
  }
});

t.test(
  'collect stays linear on hostile state files and kubeconfigs (the yaml library is not): 4 MiB in seconds, secrets still redacted',
  async (t) => {
    const n = await plantNode(t);
    const state = join(n.root, 'var/lib/bundle-agent');
    const big = 4 * 1024 * 1024 - 4096;
    const fill = (unit: string) => unit.repeat(Math.floor(big / unit.length));
    // each took the yaml library minutes to hours (128 KiB of `"`: 28 s; 128 KiB of `? ? …` chains: 18 s)
    await writeFile(join(state, 'quotes.json'), `{"password": "${S.jsonPassword}"}\n${fill('"')}`);
    await writeFile(join(state, 'quote-space.json'), fill('" '));
    await writeFile(join(state, 'brackets.json'), fill('[]'));
    await writeFile(join(state, 'spaces.json'), `{"token": "${S.kubeToken}",${fill(' \n')}}`);
    await writeFile(
      join(n.root, 'etc/kubernetes/kubeconfig'),
      `users:\n- name: u\n  user:\n    token: ${S.kubeToken}\n${`${'? '.repeat(90)}a\n`.repeat(300)}`,
    );
    const out = join(n.dir, 'hostile.tar.gz');
    const started = Date.now();
    const r = await collect(parseConfig(await readFile(n.config, 'utf8')), {
      configPath: n.config,
      output: out,
      journal: ['true'],
      runtimeJournal: ['true'],
    });
    const ms = Date.now() - started;
    t.ok(ms < 30_000, `collected in ${ms} ms`);
    t.notMatch(r.notes.join('\n'), /not collected/, 'everything in time');
    const files = await unpack(out, join(n.dir, 'h'));
    t.ok(
      ['state/quotes.json', 'state/quote-space.json', 'state/spaces.json', 'kubeconfig.yaml'].every(
        (f) => files.has(f),
      ),
      'every hostile file collected',
    );
    const all = gunzipSync(await readFile(out)).toString('latin1');
    t.notOk(
      all.includes(S.jsonPassword) || all.includes(S.kubeToken),
      'their secrets redacted by the line rules',
    );
  },
);

t.test(
  'YAML past the parse bound (line rules only): quoted keys, continuation lines and every key the document rule knows',
  async (t) => {
    const n = await plantNode(t);
    const L = Object.fromEntries(
      [
        'dq',
        'sq',
        'plain1',
        'plain2',
        'plain3',
        'flow1',
        'flow2',
        'tagged',
        'seq',
        'htpasswd',
        'session',
        'kDq',
        'kSq',
        'kCont',
        'kSession',
      ].map((k) => [k, `${k}-${alnum(20)}`]),
    );
    const pad = (what: string, count: number) =>
      Array.from({ length: count }, (_, i) => what.replace(/#/g, String(i))).join('\n');
    const stateYaml = [
      'registry: quay.io',
      `"password": ${L.dq}`,
      `'token': ${L.sq}`,
      `password: ${L.plain1}`,
      `  ${L.plain2}`,
      '',
      `  ${L.plain3}`,
      `clientSecret: "${L.flow1}`,
      `  ${L.flow2}"`,
      'secret: !!binary |',
      `  ${L.tagged}`,
      'tokens:',
      `- ${L.seq}`,
      `htpasswd: admin:${L.htpasswd}`,
      `sessionId: ${L.session}`,
      'mirrors:',
      pad('- name: mirror-#\n  location: registry-#.example:5000', 2000),
      'after: kept',
      '',
    ].join('\n');
    const kubeconfig = [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      pad('- name: cluster-#\n  cluster:\n    server: https://api-#.cluster.example:6443', 1500),
      'users:',
      '- name: a',
      '  user:',
      `    "token": ${L.kDq}`,
      '- name: b',
      '  user:',
      `    'password': ${L.kSq}`,
      '    username: bob',
      '- name: c',
      '  user:',
      `    token: first-part`,
      `      ${L.kCont}`,
      '    extensions:',
      `    - sessionId: ${L.kSession}`,
      '      name: ext',
      '',
    ].join('\n');
    t.ok(
      stateYaml.length > MAX_COLLECT_YAML_PARSE_BYTES &&
        kubeconfig.length > MAX_COLLECT_YAML_PARSE_BYTES,
      'both past the parse bound',
    );
    await writeFile(join(n.root, 'var/lib/bundle-agent/big.yaml'), stateYaml);
    await writeFile(join(n.root, 'etc/kubernetes/kubeconfig'), kubeconfig);
    const out = join(n.dir, 'big.tar.gz');
    await collect(parseConfig(await readFile(n.config, 'utf8')), {
      configPath: n.config,
      output: out,
      journal: ['true'],
      runtimeJournal: ['true'],
    });
    const files = await unpack(out, join(n.dir, 'b'));
    const all = gunzipSync(await readFile(out)).toString('latin1');
    t.same(
      Object.entries(L)
        .filter(([, v]) => all.includes(v))
        .map(([k]) => k),
      [],
      'none of the planted values in the archive',
    );
    const state = files.get('state/big.yaml')!;
    for (const kept of [
      'registry: quay.io\n"password": <redacted>\n\'token\': <redacted>\n',
      'htpasswd: <redacted>\nsessionId: <redacted>\nmirrors:\n- name: mirror-0\n',
      'location: registry-1999.example:5000\nafter: kept',
    ]) {
      t.ok(state.includes(kept), `state: ${JSON.stringify(kept)}`);
    }
    const kc = files.get('kubeconfig.yaml')!;
    t.ok(
      kc.includes('server: https://api-1499.cluster.example:6443') &&
        kc.includes('    username: bob\n- name: c') &&
        kc.includes('      name: ext'),
      'the kubeconfig: all else kept',
    );
  },
);
