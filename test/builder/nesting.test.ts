// YAML and JSON from outside nest at most MAX_NESTING_DEPTH levels (issue #44 item 5): the yaml
// library recurses per level, and a 3 MB `[[[[…` bundle file, an ImageSetConfiguration or a
// 64 KB operator catalog aborted `bundle create` (V8 heap out of memory, rc 134). The linear
// pre-scan (packages/host/src/nesting-depth.ts, yaml-depth.ts) refuses them before any parser,
// with one line naming the file, its line and the limit, in a 256 MB heap.
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse, parseAllDocuments, parseDocument, stringify } from 'yaml';
import { MAX_NESTING_DEPTH, nestingTooDeep, valueTooDeep } from '@offline-bundle/host';
import { BUNDLE_BIN, ROOT, errorCode, keygen, run } from './lib.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';

/** The nesting the yaml library builds (collections only). */
const realDepth = (v: unknown): number =>
  v && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(realDepth)) : 0;
/** The least bound the scan accepts `text` under: its count of the nesting. */
const counted = (text: string, syntax: 'json' | 'yaml') => {
  let max = 0;
  while (nestingTooDeep(text, syntax, max) !== undefined) max++;
  return max;
};

t.test('the scan counts what the yaml library builds, for every kind of collection', async (t) => {
  const docs: Record<string, string> = {
    'flow sequences': `a: ${'['.repeat(7)}1${']'.repeat(7)}\n`,
    'flow mappings over lines': 'a: {b: {c:\n  {d: [1,\n   2]}}}\n',
    'block mappings':
      Array.from({ length: 9 }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n') + ' v\n',
    'compact sequences': '- - - - - x\n- y\n',
    "a sequence at its key's indentation": 'a:\n- b:\n  - c:\n    - d\nz: 1\n',
    'pairs in flow sequences': 'a: [x: [y: [z: 1]]]\n',
    'explicit keys': '? - a\n  - b\n: - c\n',
    documents: 'a: [[1]]\n---\n- - - x\n...\n',
    'anchors and tags': 'a: &x !!seq [[1]]\nb: *x\n',
    'JSON as YAML': JSON.stringify({ a: [{ b: [[1, 2], { c: 'd' }] }] }, null, 2),
  };
  for (const [name, text] of Object.entries(docs)) {
    const real = Math.max(...parseAllDocuments(text).map((d) => realDepth(d.toJS())));
    t.equal(counted(text, 'yaml'), real, `${name}: ${real} levels`);
  }
});

t.test('brackets and indentation that are text are not counted', async (t) => {
  const text = [
    'a: "[[[[{{{{ \\" [[["',
    "b: '[[[['' [[[['",
    'c: x[[[[ y:{{{{',
    'd: # [[[[[[',
    'e: |',
    '  [[[[[[[[',
    '    - - - - - -',
    '      k:',
    '        k:',
    'f: >-',
    '  {{{{{{{{',
    'g: "multi',
    '  [[[[ line"',
  ].join('\n');
  t.equal(counted(text, 'yaml'), 1, 'one mapping');
  t.equal(counted('{"a": "[[[[\\"[[[[", "b": ["{{{{"]}', 'json'), 2);
});

t.test('the bound: MAX_NESTING_DEPTH levels read, one more refused, at its line', async (t) => {
  t.equal(MAX_NESTING_DEPTH, 100);
  const flow = (n: number) => `a:\n  b: ${'['.repeat(n - 2)}${']'.repeat(n - 2)}\n`;
  t.equal(nestingTooDeep(flow(100), 'yaml'), undefined);
  t.equal(nestingTooDeep(flow(101), 'yaml'), 2, 'line 2');
  const block = (n: number) => Array.from({ length: n }, (_, i) => `${' '.repeat(i)}k:`).join('\n');
  t.equal(nestingTooDeep(block(100), 'yaml'), undefined);
  t.equal(nestingTooDeep(block(101), 'yaml'), 101);
  t.equal(nestingTooDeep('- '.repeat(101) + 'x', 'yaml'), 1);
  t.equal(nestingTooDeep('['.repeat(100) + ']'.repeat(100), 'json'), undefined);
  t.equal(nestingTooDeep('{"a":\n' + '['.repeat(100), 'json'), 2);
});

t.test(
  'a quote inside a plain scalar is text, not the start of a quoted one that hides the brackets after it',
  async (t) => {
    const deep = '['.repeat(150) + ']'.repeat(150);
    const shapes = [
      `x: [a'b, ${deep}]`,
      `x: [a"b, ${deep}]`,
      `k: abc\n  "def\nj: ${deep}\n`,
      `- abc\n  'def\n- ${deep}\n`,
      `x: {a: b'c, d: ${deep}}`,
      `x: &a${deep}`,
      `x: [!t"b", ${deep}]`,
      `x: [a, #]]]\n ${deep}]`,
      `x: a'b: ${deep}`,
    ];
    for (const text of shapes) {
      // some are not valid YAML: the library builds them all the same before it says so
      t.ok(
        Math.max(...parseAllDocuments(text).map((d) => realDepth(d.toJS()))) > MAX_NESTING_DEPTH,
        `the library builds ${JSON.stringify(text.slice(0, 16))} deep`,
      );
      t.not(nestingTooDeep(text, 'yaml'), undefined, 'the scan refuses it');
    }
    // where a scalar starts a quote still opens one: its brackets are text
    const quoted = [
      'a: [? "[[[[" : x, {"k": \'[[\'}, b: "]]"]',
      "a: x'y\n  'z\nb: '[[[['",
      '- [a,\n  "b, [[", c]\n',
    ];
    for (const text of quoted) t.equal(counted(text, 'yaml'), realDepth(parse(text)), text);
  },
);

/** Anchors `&a0`…, each `levels` deep and holding an alias of the one before. */
const aliasChain = (anchors: number, levels: number) =>
  Array.from(
    { length: anchors },
    (_, k) =>
      `a${k}: &a${k} ${'['.repeat(levels - 1)}${k ? `*a${k - 1}` : '1'}${']'.repeat(levels - 1)}`,
  ).join('\n') + '\n';

t.test(
  "aliases put their anchors' depth where they stand: refused after parsing, by a walk that does not recurse",
  async (t) => {
    const text = aliasChain(90, 90);
    t.ok(
      text.length < 18_000 && nestingTooDeep(text, 'yaml') === undefined,
      'the text scan passes 17.5 KB of them',
    );
    const value: unknown = parseDocument(text).toJS({ maxAliasCount: -1 });
    t.throws(() => JSON.stringify(value), /call stack/, '8,100 levels parsed');
    t.equal(valueTooDeep(value), true);
    t.equal(
      valueTooDeep(parse(aliasChain(5, 90), { maxAliasCount: 100 })),
      true,
      '450 levels within the alias bound',
    );
    t.equal(valueTooDeep(parse('a: &x [*x]')), true, 'an alias inside its own anchor');
    t.equal(
      valueTooDeep(parse(`a: &x ${'['.repeat(50)}${']'.repeat(50)}\nb: [*x, *x, {c: *x}]\n`)),
      false,
      'anchors of real files still read',
    );
  },
);

/** `bundle ARGS` in a 256 MB heap: exit code, stderr, and how long it took. */
async function bundleSmallHeap(args: string[]) {
  const start = Date.now();
  const r = await run(process.execPath, ['--max-old-space-size=256', BUNDLE_BIN, ...args]);
  return { ...r, seconds: (Date.now() - start) / 1000 };
}

const work = await tmpdir(t, 'ob-nesting-');
const deepFlow = `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nversion: '1.0'\nimages: ${'['.repeat(1_500_000)}${']'.repeat(1_500_000)}\n`;
const quoteThenDeep = `apiVersion: offline-bundle/v1alpha1\nkind: Bundle\nversion: '1.0'\nimages: [a'b, ${'['.repeat(1_500_000)}${']'.repeat(1_500_000)}]\n`;
const deepImageSet =
  'kind: ImageSetConfiguration\napiVersion: mirror.openshift.io/v2alpha1\nmirror:\n  additionalImages:\n  ' +
  '- '.repeat(1_500_000) +
  'x\n';

for (const [name, text, line] of [
  ['a 3 MB bundle file of `[[[[…`', deepFlow, 4],
  ['a 3 MB ImageSetConfiguration of `- - - …`', deepImageSet, 5],
  ["a 3 MB bundle file of `[a'b, [[[[…`", quoteThenDeep, 4],
  ['a bundle file of aliases 450 levels deep', aliasChain(5, 90), 0],
] as const) {
  t.test(`${name}: refused with one line, in a 256 MB heap`, async (t) => {
    const file = path.join(work, `${name.replace(/\W+/g, '-')}.yaml`);
    await writeFile(file, text);
    t.ok(text.length > 3_000_000 || line === 0);
    const r = await bundleSmallHeap([
      'create',
      '--cache',
      path.join(work, 'cache'),
      '-f',
      file,
      '--dry-run',
    ]);
    t.equal(r.code, 1, `exit 1, not an abort (${r.stderr.slice(0, 300)})`);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, 'one line');
    t.equal(errorCode(r.stderr), 'TOO_DEEPLY_NESTED', r.stderr.slice(0, 300));
    t.match(
      r.stderr,
      line
        ? `${file}:${line} nests deeper than 100 levels`
        : `${file} nests deeper than 100 levels (MAX_NESTING_DEPTH) once its aliases`,
    );
    t.ok(r.seconds < 20, `${r.seconds.toFixed(1)} s`);
  });
}

t.test(
  "a release payload's release-manifests/ file of a 3 MB `[[[[…`: skipped as one that does not parse, in a 256 MB heap",
  async (t) => {
    // the warning scan of `bundle create` (pullAlwaysWorkloads), run alone: a release image is a registry's content
    const script = `import { pullAlwaysWorkloads } from '@offline-bundle/openshift-release';
    const deep = Buffer.from('kind: Pod\\nspec: ' + '['.repeat(1_500_000) + ']'.repeat(1_500_000) + '\\n');
    const pod = Buffer.from('kind: Pod\\nmetadata: {name: p}\\nspec:\\n  containers:\\n  - {image: "r.example/a:1", imagePullPolicy: Always}\\n');
    const found = pullAlwaysWorkloads(new Map([['release-manifests/0-deep.yaml', deep], ['release-manifests/1-pod.yaml', pod]]), [{ registry: 'r.example', repository: 'a', tag: '1' }]);
    console.log(JSON.stringify(found.map((w) => w.object)));`;
    const r = await run(
      process.execPath,
      ['--max-old-space-size=256', '--input-type=module', '-e', script],
      { cwd: ROOT },
    );
    t.equal(r.code, 0, r.stderr.slice(0, 300));
    t.same(JSON.parse(r.stdout), ['/Pod/p'], 'the other file still read');
  },
);

t.test(
  'an operator catalog image whose file-based catalog nests 32,000 levels: refused naming the image and file',
  async (t) => {
    const reg = await startRegistry();
    t.teardown(() => reg.stop());
    const keys = await keygen(work);
    const catalog = await pushImage(
      {
        tag: 'v1',
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            config: { Labels: { 'operators.operatorframework.io.index.configs.v1': '/configs' } },
            layers: [
              {
                'configs/deep/catalog.yaml': `schema: olm.package\nname: deep\nicon: ${'['.repeat(32_000)}${']'.repeat(32_000)}\n`,
              },
            ],
          },
        ],
      },
      `${reg.host}/redhat/deep-index:v1`,
    );
    const file = path.join(work, 'operators.yaml');
    await writeFile(
      file,
      stringify({
        apiVersion: 'offline-bundle/v1alpha1',
        kind: 'Bundle',
        version: '1.0',
        operators: [{ catalog: catalog.ref, packages: [{ name: 'deep' }] }],
      }),
    );
    const r = await bundleSmallHeap([
      'create',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      path.join(work, 'cache'),
      '--key',
      keys.key,
      '-o',
      path.join(work, 'o.bundle'),
      '-f',
      file,
    ]);
    t.equal(r.code, 1, r.stderr.slice(0, 300));
    t.equal(r.stderr.trimEnd().split('\n').length, 1, 'one line');
    t.equal(errorCode(r.stderr), 'TOO_DEEPLY_NESTED', r.stderr.slice(0, 300));
    t.match(
      r.stderr,
      `catalog ${catalog.ref}: "configs/deep/catalog.yaml":3 nests deeper than 100 levels`,
    );
  },
);
