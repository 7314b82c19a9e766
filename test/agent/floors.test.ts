// tier: unit
// The agent's floors (.dependency-cruiser.cjs, docs/ARCHITECTURE.md): `pnpm lint` refuses an
// import that points up a floor. Run in-process through dependency-cruiser's API, on the real
// tree and on a copy of it with upward imports planted (the checkout itself is never touched).
import t from 'tap';
import { cp, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cruise, type ICruiseResult } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const options = await extractDepcruiseOptions(join(ROOT, '.dependency-cruiser.cjs'));
const floorRules = (options.ruleSet?.forbidden ?? []).filter((r) =>
  r.name?.startsWith('agent-floor-'),
);

async function cruiseAgent(baseDir: string): Promise<ICruiseResult> {
  const { output } = await cruise(['agent/src'], { ...options, validate: true, baseDir });
  return output as ICruiseResult;
}
const violations = (r: ICruiseResult) =>
  r.summary.violations.map((v) => `${v.rule.name}: ${v.from} → ${v.to}`).sort();

t.test('the agent as it is keeps to its floors', async (t) => {
  const result = await cruiseAgent(ROOT);
  t.ok(
    result.modules.filter((m) => m.source.startsWith('agent/src/')).length > 60,
    'the whole agent was cruised',
  );
  t.same(violations(result), [], 'no upward import, no cycle');
});

t.test('every folder of agent/src stands on a floor', async (t) => {
  const folders = (await readdir(join(ROOT, 'agent/src'), { withFileTypes: true }))
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
  const floored = (f: string) =>
    floorRules.some((r) => new RegExp(String(r.from.path)).test(`agent/src/${f}/x.ts`));
  // the top floor (daemon) has no rule of its own only if nothing is above it: entry files are
  t.same(
    folders.filter((f) => !floored(f)),
    [],
    'a new folder goes into AGENT_FLOORS in .dependency-cruiser.cjs',
  );
});

// Each plant imports one floor above its own (or a sibling on it): a file path, what it imports, the rule that refuses it.
const PLANTS: [string, string, string][] = [
  [
    'state/planted.ts',
    "import { runDaemon } from '../daemon/daemon.js';\nexport const planted = runDaemon;\n",
    'agent-floor-state',
  ],
  // type-only imports count: a type is as much a dependency when the code is read
  [
    'runtime/planted.ts',
    "import type { PipelineContext } from '../load/pipeline-context.js';\nexport type Planted = PipelineContext;\n",
    'agent-floor-runtime',
  ],
  [
    'self-upgrade/planted.ts',
    "import { checkPolicy } from '../load/policy.js';\nexport const planted = checkPolicy;\n",
    'agent-floor-self-upgrade',
  ],
  [
    'load/planted.ts',
    "import { releasesTable } from '../releases/releases-text.js';\nexport const planted = releasesTable;\n",
    'agent-floor-load',
  ],
  [
    'releases/planted.ts',
    "import type { PeerEndpoint } from '../peers/types.js';\nexport type Planted = PeerEndpoint;\n",
    'agent-floor-releases',
  ],
  [
    'peers/planted.ts',
    "import { listReleases } from '../releases/releases.js';\nexport const planted = listReleases;\n",
    'agent-floor-peers',
  ],
  [
    'daemon/planted.ts',
    "import { buildProgram } from '../cli.js';\nexport const planted = buildProgram;\n",
    'agent-floor-daemon',
  ],
  // cli.ts runs the program when imported: a command module (or any other file) never imports it
  [
    'commands/planted.ts',
    "import { addRunCommand } from '../cli.js';\nexport const planted = addRunCommand;\n",
    'agent-floor-entry',
  ],
];

t.test('an upward import planted on each floor is refused, naming its rule', async (t) => {
  const base = await tmpdir(t, 'ob-floors-');
  await cp(join(ROOT, 'agent/src'), join(base, 'agent/src'), { recursive: true });
  for (const [file, text] of PLANTS) await writeFile(join(base, 'agent/src', file), text);
  // the base floor is files, not a folder: an import added to one of them
  const version = join(base, 'agent/src/version.ts');
  await writeFile(
    version,
    (await readFile(version, 'utf8')) +
      "import { withLoadLock } from './state/lock.js';\nexport const planted = withLoadLock;\n",
  );
  // imports that point down, or from the entry files, stay allowed
  await writeFile(
    join(base, 'agent/src/load/planted-down.ts'),
    "import { withLoadLock } from '../state/lock.js';\nimport { namesOf } from '../runtime/runtime-target.js';\nimport { oneLine } from '../errors.js';\nexport const planted = [withLoadLock, namesOf, oneLine];\n",
  );
  await writeFile(
    join(base, 'agent/src/planted-entry.ts'),
    "import { runDaemon } from './daemon/daemon.js';\nexport const planted = runDaemon;\n",
  );
  // commands/ stands on the entry floor: it imports the other entry files, and they it
  await writeFile(
    join(base, 'agent/src/commands/planted-entry.ts'),
    "import { checkKubeconfig } from '../kubeconfig-check.js';\nimport { addCollectCommand } from '../collect-command.js';\nexport const planted = [checkKubeconfig, addCollectCommand];\n",
  );

  const seen = violations(await cruiseAgent(base));
  const expected = PLANTS.map(
    ([file, text, rule]) =>
      `${rule}: agent/src/${file} → ${join('agent/src', file, '..', /from '([^']+)'/.exec(text)![1]!).replace(/\.js$/, '.ts')}`,
  );
  expected.push('agent-floor-base: agent/src/version.ts → agent/src/state/lock.ts');
  t.same(seen, expected.sort(), "each plant refused by its floor's rule, and nothing else");
  t.equal(floorRules.length, PLANTS.length + 1, 'a plant for every floor rule');
  const comment = floorRules.find((r) => r.name === 'agent-floor-state')?.comment ?? '';
  t.match(
    comment,
    /base < state < runtime < self-upgrade < load < releases \| peers < daemon < entry < cli/,
    'the refusal names the order',
  );
});
