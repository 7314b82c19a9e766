// tier: unit
// The release's own version comes from one place (issue #39): every package.json of the
// workspace says the same (scripts/package.mjs names the agent's tarballs and image tags after
// agent/package.json, the bundle and bundle-deploy tarballs after builder/package.json; each
// CLI's --version reads its own), and README.md, docs/*.md, deploy/**, systemd/** and what
// deploy/openshift/generate.mjs writes name bundle-agent's artifacts, image tags and
// --want-version with that version and no other: a README that named 0.1.0 beside 0.2.0
// artifacts could not be copied, and a DaemonSet naming an image no stick brings never starts.
// The forms below are ours only: versions of OpenShift, k3s, Ignition or npm packages, and the
// history ("agents older than 0.2.0", "the 0.1.0 reader"), are not matched.
import t from 'tap';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { parse as parseYaml } from 'yaml';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const VERSION = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8'))
  .version as string;

// MAJOR.MINOR.PATCH[-PRERELEASE] (as the bootstrap's --want-version takes it), stopping before
// the -linux-ARCH / -ARCH that follow it in artifact names and per-platform tags
const V = String.raw`(\d+\.\d+\.\d+(?:-(?!linux\b|amd64\b|arm64\b)[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)`;
const FORMS: [string, RegExp][] = [
  // bundle-agent-V-linux-ARCH.tar.gz, bundle-V-linux-ARCH.tar.gz, bundle-agent-V.oci.tar, bundle-agent-V-ARCH.oci.tar, bundle-deploy-V.tar.gz
  ['artifact name', new RegExp(String.raw`(?<![\w.-])bundle(?:-agent|-deploy)?-${V}`, 'g')],
  ['image tag bundle-agent:V', new RegExp(String.raw`\bbundle-agent:${V}`, 'g')],
  ['oci-archive:FILE:V', new RegExp(String.raw`\boci-archive:[^\s\`:]*:${V}`, 'g')],
  ['--want-version V', new RegExp(String.raw`--want-version[ =]${V}`, 'g')],
  // the image archive's index and per-platform tags (README, "One image archive for both platforms")
  ['tagged `V`', new RegExp(String.raw`tagged \`${V}\``, 'g')],
  ['`V-ARCH`', new RegExp(String.raw`\`${V}-(?:amd64|arm64)\``, 'g')],
  [
    'bundle inspect\'s "agent: bundle-agent V ("',
    new RegExp(String.raw`agent:\s+bundle-agent ${V} \(`, 'g'),
  ],
  [
    "bundle.json's creator version",
    new RegExp(String.raw`"tool": "offline-bundle", "version": "${V}"`, 'g'),
  ],
];

interface Hit {
  where: string;
  form: string;
  version: string;
}

function versionsIn(where: string, text: string): Hit[] {
  const hits: Hit[] = [];
  for (const [form, re] of FORMS) {
    for (const m of text.matchAll(re))
      hits.push({
        where: `${where}:${text.slice(0, m.index).split('\n').length}`,
        form,
        version: m[1]!,
      });
  }
  return hits;
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(path.join(ROOT, dir), { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)))
    .sort();
}

/** Hits in a file; in a MachineConfig also in every file it carries (base64, gzip), which grep cannot see. */
async function versionsInFile(where: string, file: string): Promise<Hit[]> {
  const text = await readFile(file, 'utf8');
  if (!/^99-\w+-bundle-agent\.yaml$/.test(path.basename(file))) return versionsIn(where, text);
  const carried = (
    parseYaml(text).spec.config.storage.files as {
      path: string;
      contents: { source: string; compression?: string };
    }[]
  ).map((f) => {
    const bytes = Buffer.from(f.contents.source.replace(/^data:[^,]*;base64,/, ''), 'base64');
    return versionsIn(
      `${where} ${f.path}`,
      (f.contents.compression === 'gzip' ? gunzipSync(bytes) : bytes).toString('utf8'),
    );
  });
  return [...versionsIn(where, text), ...carried.flat()];
}

const wrong = (hits: Hit[]) =>
  hits.filter((h) => h.version !== VERSION).map((h) => `${h.where}: ${h.form}: ${h.version}`);

t.test(`every package.json of the workspace says ${VERSION}, the root's`, async (t) => {
  const globs = (
    parseYaml(await readFile(path.join(ROOT, 'pnpm-workspace.yaml'), 'utf8')) as {
      packages: string[];
    }
  ).packages;
  const dirs = (
    await Promise.all(
      globs.map(async (g) =>
        g.endsWith('/*')
          ? (await readdir(path.join(ROOT, g.slice(0, -2)))).map((d) => `${g.slice(0, -2)}/${d}`)
          : [g],
      ),
    )
  ).flat();
  t.ok(dirs.includes('agent') && dirs.includes('builder'), 'the agent and the builder among them');
  for (const dir of dirs)
    t.equal(
      JSON.parse(await readFile(path.join(ROOT, dir, 'package.json'), 'utf8')).version,
      VERSION,
      `${dir}/package.json`,
    );
});

t.test(
  `README.md, docs/*.md, deploy/**, systemd/** and generate.mjs's output name bundle-agent ${VERSION} only`,
  async (t) => {
    const files = [
      ...(await readdir(ROOT)).filter((f) => f.endsWith('.md')),
      ...(await readdir(path.join(ROOT, 'docs')))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
      ...(await filesUnder('deploy')),
      ...(await filesUnder('systemd')),
    ];
    t.ok(
      files.includes('README.md') &&
        files.includes('deploy/kubernetes/daemonset.yaml') &&
        files.includes('deploy/openshift/99-worker-bundle-agent.yaml'),
      'the README, the DaemonSet and the MachineConfigs among them',
    );
    const hits = (
      await Promise.all(files.map((f) => versionsInFile(f, path.join(ROOT, f))))
    ).flat();

    // what an admin's run writes (that the committed outputs are this: test/package/deploy.test.ts)
    const gen = (await import(path.join(ROOT, 'deploy/openshift/generate.mjs'))) as {
      main: (argv: string[], out: { write: (s: string) => void }) => Promise<void>;
      DEFAULT_IMAGE: string;
      AGENT_REPOSITORY: string;
    };
    t.equal(
      gen.DEFAULT_IMAGE,
      `${gen.AGENT_REPOSITORY}:${VERSION}`,
      "the unit's default image: the tag pnpm package gives the agent image",
    );
    const run = async (args: string[], out?: string) => {
      let said = '';
      await gen.main([...args, ...(out ? ['--out', out] : [])], {
        write: (s) => {
          said += s;
        },
      });
      return versionsIn(
        `generate.mjs ${[...args, ...(out ? ['--out DIR'] : [])].join(' ')} (stdout)`,
        said,
      );
    };
    hits.push(...(await run(['--help'])));
    for (const args of [[], ['--plain-unit']]) {
      const out = await tmpdir(t, 'ob-versions-');
      hits.push(...(await run(args, out)));
      for (const f of await readdir(out))
        hits.push(
          ...(await versionsInFile(`generate.mjs ${[...args, f].join(' ')}`, path.join(out, f))),
        );
    }

    t.strictSame(wrong(hits), [], `every version of ours names ${VERSION} (package.json)`);
    // a pattern that matches nothing checks nothing: reworded text needs its form here updated
    for (const [form] of FORMS)
      t.ok(
        hits.some((h) => h.form === form),
        `found: ${form}`,
      );
  },
);
