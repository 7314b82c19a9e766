// `bundle create -f FILE` (#23), part two: the shipped schema and man page, limits, and errors that
// name their input (bundle-file-setup.ts holds the registry and releases both parts use).
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { Ajv } from 'ajv';
import { stringify } from 'yaml';
import { releaseFiles, writeImageLayout } from '../helpers/images.mjs';
import { ROOT, bundle, errorCode, listDir } from './lib.js';
import {
  work,
  keys,
  H,
  EPOCH,
  app,
  cvo1,
  etcd,
  rel1,
  rel2,
  graphFile,
  createFrom,
  own,
} from './bundle-file-setup.js';

t.test(
  'the shipped schema is the one the tool checks with, and the man page lists every field',
  async (t) => {
    const printed = await bundle(['schema']);
    t.equal(
      await readFile(path.join(ROOT, 'builder', 'bundle.schema.json'), 'utf8'),
      printed.stdout,
      'builder/bundle.schema.json is `bundle schema`',
    );
    const validate = new Ajv({ strict: true, strictRequired: false }).compile(
      JSON.parse(printed.stdout),
    );
    t.ok(
      validate(
        own({
          release: { channel: 'stable-4.14', versionRange: '>=4.14.0' },
          images: ['x'],
          key: 'k',
          level: 3,
        }),
      ),
      'accepts a good file',
    );
    t.notOk(validate(own({ helm: {} })), 'refuses what the tool refuses');
    t.notOk(validate(own({ charts: [{ name: 'c' }] })), 'a chart is a reference, not a mapping');
    t.notOk(validate(own({ operators: [{ catalog: 'c' }] })), 'an operator needs its packages');
    const man = (await bundle(['man'])).stdout;
    const fields = [...printed.stdout.matchAll(/^ {4}"([a-zA-Z]+)": \{/gm)].map((m) => m[1]!);
    t.ok(fields.length > 20);
    for (const f of [...fields, 'release.channel', 'release.versionRange', 'release.updateGraph'])
      t.match(man, new RegExp(`^\\.B ${f.replace('.', '\\.')}$`, 'm'), `man page: ${f}`);
  },
);

t.test(
  'limits: a bundle file over 4 MiB, an alias bomb, a graph over 32 MiB, a graph that is not one',
  async (t) => {
    const big = await createFrom(
      `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n#${'x'.repeat(4 * 1024 * 1024)}\n`,
      ['--key', keys.key, '-o', 'o.bundle'],
    );
    t.equal(errorCode(big.stderr), 'FILE_TOO_LARGE', 'bundle file');
    const laughs = [
      'a: &a ["x","x","x","x","x","x","x","x","x","x"]',
      ...Array.from(
        { length: 8 },
        (_, i) =>
          `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
            .fill(`*${String.fromCharCode(97 + i)}`)
            .join(',')}]`,
      ),
    ].join('\n');
    const bomb = await createFrom(
      `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n${laughs}\n`,
      ['--key', keys.key, '-o', 'o.bundle'],
    );
    t.equal(errorCode(bomb.stderr), 'INVALID_CONFIG', 'alias bomb');
    t.match(bomb.stderr, /alias/i);
    const hugeGraph = path.join(work, 'huge-graph.json');
    await writeFile(hugeGraph, `{"nodes":[],"pad":"${'x'.repeat(32 * 1024 * 1024)}"}`);
    const doc = own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' });
    const huge = await createFrom(doc, ['--update-graph', hugeGraph]);
    t.equal(errorCode(huge.stderr), 'FILE_TOO_LARGE', 'graph');
    const notGraph = path.join(work, 'not-graph.json');
    await writeFile(
      notGraph,
      JSON.stringify({ nodes: [{ version: '4.14.1', payload: 'x' }], edges: [[0, 5]] }),
    );
    const bad = await createFrom(doc, ['--update-graph', notGraph]);
    t.equal(errorCode(bad.stderr), 'INVALID_CONFIG');
    t.match(bad.stderr, /is not an update graph: edges\[0\] is not a pair of node indexes/);
  },
);

t.test(
  'a missing image names the line or flag that asked for it, and whether the repository or the tag is unknown',
  async (t) => {
    const tag = await createFrom(
      own({
        version: '1',
        images: [app.ref, `${H}/team/app:v9`],
        key: keys.key,
        output: 'o.bundle',
      }),
    );
    t.equal(errorCode(tag.stderr), 'NOT_FOUND');
    t.match(
      tag.stderr,
      /bundle\.yaml:\d+ \(images\[1\]\): manifest v9 not found in [^ ]+\/team\/app \(the repository exists; the tag or digest does not\)/,
    );
    const repo = await createFrom(own({ version: '1', key: keys.key, output: 'o.bundle' }), [
      '--image',
      app.ref,
      '--image',
      `${H}/team/nothing:v1`,
    ]);
    t.equal(errorCode(repo.stderr), 'NOT_FOUND');
    t.match(
      repo.stderr,
      /--image #2: manifest v1 not found: the repository [^ ]+\/team\/nothing is unknown to the registry/,
    );
    t.same(await listDir(repo.dir), ['bundle.yaml'], 'nothing written');
  },
);

t.test('a missing key file is one plain sentence, from the file or the flag', async (t) => {
  const r = await createFrom(
    own({ version: '1', images: [app.ref], key: 'nowhere.key', output: 'o.bundle' }),
  );
  t.equal(errorCode(r.stderr), 'KEY_ERROR');
  t.match(r.stderr, /the key file \/.*\/nowhere\.key does not exist: check the path/);
  t.notMatch(r.stderr, /ENOENT/);
});

t.test('--update-graph without a release named by channel is refused', async (t) => {
  const noFile = await bundle([
    'create',
    '--quiet',
    '--version',
    '1',
    '--image',
    app.ref,
    '--update-graph',
    graphFile,
    '--key',
    keys.key,
    '-o',
    path.join(work, 'never.bundle'),
  ]);
  t.equal(errorCode(noFile.stderr), 'INVALID_CONFIG');
  t.match(noFile.stderr, /--update-graph goes with -f/);
  const pinned = await createFrom(own({ release: rel1.ref, key: keys.key, output: 'o.bundle' }), [
    '--update-graph',
    graphFile,
  ]);
  t.equal(errorCode(pinned.stderr), 'INVALID_CONFIG');
  t.same(await listDir(pinned.dir), ['bundle.yaml']);
});

t.test(
  'many problems: the first 20 named, then how many more (each located once, not by a search per problem)',
  async (t) => {
    const unknown = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`unknown${i}`, i]));
    for (const [what, doc, re] of [
      [
        'bundle file',
        own({ images: [app.ref], ...unknown }),
        /unknown19\): unknown field[^\n]*\n {2}and 4980 more\nbundle: INVALID_CONFIG: 5000 problems in the bundle file [^\n]*, nothing fetched \(each is on a line above\)$/,
      ],
      [
        'ImageSetConfiguration',
        {
          kind: 'ImageSetConfiguration',
          apiVersion: 'mirror.openshift.io/v2alpha1',
          mirror: { additionalImages: [{ name: app.ref }] },
          ...unknown,
        },
        /5000 fields of the ImageSetConfiguration .*\(unknown19\): not a field[^;]*; and 4980 more$/,
      ],
    ] as const) {
      const r = await createFrom(doc, ['--key', keys.key, '-o', 'o.bundle']);
      t.equal(errorCode(r.stderr), 'INVALID_CONFIG', what);
      t.match(r.stderr.trimEnd(), re, `${what}: 20 problems and a count`);
      t.notMatch(r.stderr, /unknown20\)/, `${what}: the 21st not listed`);
    }
    const json = await createFrom(own({ images: [app.ref], ...unknown }), [
      '--key',
      keys.key,
      '-o',
      'o.bundle',
      '--json',
    ]);
    t.match(
      JSON.parse(json.stdout).error.message,
      /^5000 problems in the bundle file .*unknown19\): unknown field[^;]*; and 4980 more$/,
      '--json: the problems in the message, "; "-joined',
    );
    // keys are checked unique in one pass (the yaml library's own check is quadratic): still refused
    const dup = await createFrom(
      'apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nimages: [x]\nimages: [y]\n',
      ['--key', keys.key, '-o', 'o.bundle'],
    );
    t.match(
      dup.stderr,
      /bundle\.yaml:4 is not valid YAML: the key "images" appears twice in one mapping/,
    );
  },
);

t.test("a key whose value is a block mapping or list is located on the key's line", async (t) => {
  const text =
    'apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nimages:\n  - x\ncharts:\n  - name: c\nimagez:\n  a: 1\n';
  const refused = await createFrom(text, ['--key', keys.key, '-o', 'o.bundle']);
  t.match(refused.stderr, /bundle\.yaml:6 \(charts\[0\]\): must be string/, 'charts[0] is line 6');
  const unknown = await createFrom(text.replace('charts:\n  - name: c\n', ''), [
    '--key',
    keys.key,
    '-o',
    'o.bundle',
  ]);
  t.match(unknown.stderr, /bundle\.yaml:5 \(imagez\): unknown field/, 'imagez: is line 5');
});

t.test(
  'a graph with two payloads for one version, many versions left out, several YAML documents: one plain line each',
  async (t) => {
    const dup = path.join(work, 'dup-graph.json');
    await writeFile(
      dup,
      JSON.stringify({
        nodes: [
          { version: '4.14.1', payload: rel1.digestRef },
          { version: '4.14.1', payload: rel2.digestRef },
        ],
        edges: [],
      }),
    );
    const twice = await createFrom(
      own({ release: { channel: 'stable-4.14' }, key: keys.key, output: 'o.bundle' }),
      ['--update-graph', dup],
    );
    t.equal(errorCode(twice.stderr), 'INVALID_CONFIG');
    t.match(twice.stderr, /nodes\[0\] and nodes\[1\] give version 4\.14\.1 different payloads/);
    const wide = path.join(work, 'wide-graph.json');
    await writeFile(
      wide,
      JSON.stringify({
        nodes: [
          { version: '4.14.2', payload: rel2.digestRef },
          ...Array.from({ length: 40 }, (_, i) => ({
            version: `4.13.${i}`,
            payload: rel1.digestRef,
          })),
        ],
        edges: [],
      }),
    );
    const rangeFile = path.join(work, 'range.yaml');
    await writeFile(
      rangeFile,
      stringify(
        own({ release: { channel: 'stable-4.14', versionRange: '>=4.13.0' }, images: [app.ref] }),
      ),
    );
    const range = await bundle(
      [
        'create',
        '--tls-verify=false',
        '--cache',
        path.join(work, 'cache'),
        '-f',
        rangeFile,
        '--update-graph',
        wide,
        '--dry-run',
      ],
      { env: EPOCH },
    );
    t.equal(range.code, 0, range.stderr);
    t.match(
      range.stdout + range.stderr,
      /warning: a bundle carries one release, the newest in range: (4\.13\.\d+, ){9}4\.13\.\d+ and 30 more left out/,
    );
    const docs = await createFrom(
      'apiVersion: offline-bundle/v1alpha1\nkind: Bundle\n---\nimages: [x]\n',
      ['--key', keys.key, '-o', 'o.bundle'],
    );
    t.match(
      docs.stderr,
      /bundle\.yaml:\d+ is not valid YAML: it holds several documents \(---\); a bundle file is one/,
    );
    t.notMatch(docs.stderr, /parseAllDocuments/);
  },
);

t.test(
  "relative paths of release: (a string) and of imagesFile:'s lines are the file's directory's, from any working directory",
  async (t) => {
    const dir = path.join(work, 'relative');
    await mkdir(path.join(dir, 'lists'), { recursive: true });
    await writeImageLayout(path.join(dir, 'release-layout'), {
      tag: '4.14.1',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            releaseFiles({
              version: '4.14.1',
              previous: [],
              images: { 'cluster-version-operator': cvo1.digestRef, etcd: etcd.digestRef },
            }),
          ],
        },
      ],
    });
    await writeImageLayout(path.join(dir, 'app-layout'), {
      tag: 'v1',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': 'from a layout' }] }],
    });
    await writeFile(
      path.join(dir, 'lists', 'images.txt'),
      'oci:app-layout:v1=registry.example.com/team/local:v1\n',
    );
    await writeFile(
      path.join(dir, 'bundle.yaml'),
      stringify(
        own({
          release: 'oci:release-layout:4.14.1=registry.example.com/ocp/release:4.14.1',
          imagesFile: 'lists/images.txt',
        }),
      ),
    );
    await writeFile(
      path.join(dir, 'isc.yaml'),
      stringify({
        kind: 'ImageSetConfiguration',
        apiVersion: 'mirror.openshift.io/v2alpha1',
        mirror: {
          platform: {
            release: 'oci:release-layout:4.14.1=registry.example.com/ocp/release:4.14.1',
          },
        },
      }),
    );
    for (const file of ['bundle.yaml', 'isc.yaml']) {
      const r = await bundle(
        [
          'create',
          '--tls-verify=false',
          '--cache',
          path.join(work, 'cache'),
          '-f',
          path.join(dir, file),
          '--dry-run',
          '--json',
        ],
        { env: EPOCH, cwd: work },
      );
      t.equal(r.code, 0, `${file}: ${r.stderr}`);
      t.match(r.stdout, /4\.14\.1/, `${file}: the release from the layout beside the file`);
      if (file === 'bundle.yaml')
        t.match(
          r.stdout,
          /registry\.example\.com\/team\/local:v1/,
          "the images file's line from the file's directory",
        );
    }
  },
);

t.test(
  'a value from the file is named by its key, not blamed on a flag; help says what -f and --dry-run do',
  async (t) => {
    const r = await createFrom(
      own({ version: '1.0/evil', images: [app.ref], upgradeFrom: ['x y'] }),
      ['--key', keys.key, '-o', 'o.bundle'],
    );
    t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
    t.match(r.stderr, /bundle\.yaml:\d+ \(version\): "1\.0\/evil" is not a valid release version/);
    t.notMatch(r.stderr, /--version|--upgrade-from/, 'no flag named');
    const flag = await createFrom(own({ images: [app.ref] }), [
      '--key',
      keys.key,
      '-o',
      'o.bundle',
      '--version',
      '1.0/evil',
    ]);
    t.match(
      flag.stderr,
      /--version "1\.0\/evil" is not a valid release version/,
      'a flag is named as a flag',
    );
    const help = (await bundle(['create', '--help'])).stdout.replace(/\s+/g, ' ');
    t.match(
      help,
      /--dry-run .*the cache gets the manifests, the release image's layers .* each operator catalog image's layers/,
    );
    t.match(help, /Examples:.*bundle create -f bundle\.yaml --dry-run/);
    t.match(
      (await bundle(['--help'])).stdout.replace(/\s+/g, ' '),
      /bundle create -f bundle\.yaml.*--dry-run/,
    );
  },
);

t.test(
  'bundle diff or catalog-sources of a path that does not exist: one line naming it',
  async (t) => {
    for (const args of [
      ['diff', path.join(work, 'nope-a.bundle'), path.join(work, 'nope-b.bundle')],
      ['catalog-sources', path.join(work, 'nope-a.bundle')],
    ]) {
      const r = await bundle(args);
      t.equal(errorCode(r.stderr), 'IO_ERROR', args[0]);
      t.match(
        r.stderr.trimEnd(),
        /nope-a\.bundle does not exist: give the path of a \.bundle file$/,
        args[0],
      );
      t.notMatch(r.stderr, /ENOENT/);
    }
  },
);

t.test('a five-mistake file, one run, five lines, nothing fetched', async (t) => {
  // where the file's images are: a listener that counts every connection and answers none
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  const doc = [
    'apiVersion: offline-bundle/v1alpha1',
    'kind: Bundle',
    `release: ${host}/ocp/release:4.14.1`,
    'arch: amd65',
    'images:',
    `  - ${host}/team/app:v1`,
    '  - oci-archive:missing-app.tar=registry.example.com/team/app:v2',
    'imagez:',
    `  - ${host}/team/tool:v1`,
    'releaseSignatures: [signature-1]',
    'levle: 5',
    '',
  ].join('\n');
  const r = await createFrom(doc, ['--key', keys.key, '-o', 'o.bundle']);
  t.equal(r.code, 1);
  t.equal(errorCode(r.stderr), 'INVALID_CONFIG', r.stderr);
  const lines = r.stderr.trimEnd().split('\n');
  t.equal(lines.length, 6, 'five lines and the error line');
  t.match(
    lines[0],
    /^ {2}\/.*\/bundle\.yaml:4 \(arch\): "amd65" is not an architecture images are built for \(known: 386, amd64, arm, arm64, .*\); did you mean amd64\?$/,
  );
  t.match(
    lines[1],
    /^ {2}\/.*\/bundle\.yaml:7 \(images\[1\]\): oci-archive:missing-app\.tar=registry\.example\.com\/team\/app:v2: the oci-archive: file \/.*\/missing-app\.tar does not exist: check the path/,
  );
  t.match(lines[2], /^ {2}\/.*\/bundle\.yaml:8 \(imagez\): unknown field; did you mean images\?/);
  t.match(
    lines[3],
    /^ {2}\/.*\/bundle\.yaml:10 \(releaseSignatures\[0\]\): \/.*\/signature-1 does not exist: check the path/,
  );
  t.match(lines[4], /^ {2}\/.*\/bundle\.yaml:11 \(levle\): unknown field; did you mean level\?/);
  t.match(
    lines[5],
    /^bundle: INVALID_CONFIG: 5 problems in the bundle file \/.*\/bundle\.yaml, nothing fetched \(each is on a line above\)$/,
  );
  t.same(await listDir(r.dir), ['bundle.yaml'], 'nothing written');
  // mistakes the schema lets pass: found before the release is resolved, not after the registry answered
  const schemaValid = await createFrom(
    own({
      release: `${host}/ocp/release:4.14.1`,
      arch: 'amd65',
      images: ['oci-archive:missing-app.tar=registry.example.com/team/app:v2'],
    }),
    ['--key', keys.key, '-o', 'o.bundle'],
  );
  t.equal(errorCode(schemaValid.stderr), 'INVALID_CONFIG', schemaValid.stderr);
  t.match(
    schemaValid.stderr,
    /\(arch\): "amd65" is not an architecture[^\n]*\n.*\(images\[0\]\): [^\n]*missing-app\.tar does not exist/,
  );
  t.equal(connections, 0, 'no registry asked');
  // a key a flag replaces is the flag's: the file's value is not the run's, nor its mistake
  const replaced = await createFrom(own({ arch: 'amd65', images: [app.ref], version: '1' }), [
    '--key',
    keys.key,
    '-o',
    'o.bundle',
    '--arch',
    'amd64',
    '--dry-run',
  ]);
  t.equal(replaced.code, 0, replaced.stderr);
  const flag = await createFrom(own({ images: [app.ref], version: '1' }), [
    '--dry-run',
    '--arch',
    'x86-65',
  ]);
  t.match(
    flag.stderr,
    /^bundle: INVALID_CONFIG: --arch "x86-65" is not an architecture images are built for .*$/m,
    'the flag is held to the same list',
  );
});
