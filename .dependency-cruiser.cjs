// `pnpm lint`, second half: import cycles including type-only imports, which ESLint's
// import-x/no-cycle skips (the agent's load-images <-> pipeline and image-fetch's auth <->
// credential-helper cycles were both type-only); and the agent's floors.

// The agent's floors, lowest first (docs/ARCHITECTURE.md, "The agent's floors"). A floor imports
// only its own floor and those below: a lower one stays readable and testable without the higher,
// and a change high up never ripples down. Folders on one floor do not import each other.
//   base < state < runtime < self-upgrade < load < releases | peers < daemon < entry < cli
// base is the shared top-level files below; entry every other top-level file (index, collect…)
// and commands/, one module per subcommand; cli is cli.ts alone, which assembles the commands
// and runs the program when imported: nothing may import it.
const AGENT = '^agent/src/';
const BASE_FILES = `${AGENT}(errors|log|config|config-schema|version)\\.ts$`;
const ENTRY_FILES = `${AGENT}(commands/)?[^/]+\\.ts$`;
const CLI_FILE = `${AGENT}cli\\.ts$`;
const dir = (name) => `${AGENT}${name}/`;
const AGENT_FLOORS = [
  { floor: 'base', parts: [{ name: 'base', path: BASE_FILES }] },
  { floor: 'state', parts: [{ name: 'state', path: dir('state') }] },
  { floor: 'runtime', parts: [{ name: 'runtime', path: dir('runtime') }] },
  { floor: 'self-upgrade', parts: [{ name: 'self-upgrade', path: dir('self-upgrade') }] },
  { floor: 'load', parts: [{ name: 'load', path: dir('load') }] },
  {
    floor: 'releases | peers',
    parts: [
      { name: 'releases', path: dir('releases') },
      { name: 'peers', path: dir('peers') },
    ],
  },
  { floor: 'daemon', parts: [{ name: 'daemon', path: dir('daemon') }] },
  { floor: 'entry', parts: [{ name: 'entry', path: ENTRY_FILES }] },
  { floor: 'cli', parts: [{ name: 'cli', path: CLI_FILE }] },
];
const ORDER = AGENT_FLOORS.map((f) => f.floor).join(' < ');

/** One rule per folder (or file group): it may not import a higher floor, nor a sibling on its own. */
function floorRules() {
  return AGENT_FLOORS.flatMap((f, i) =>
    f.parts.map((part) => {
      const above = AGENT_FLOORS.slice(i + 1).flatMap((g) => g.parts);
      const siblings = f.parts.filter((p) => p !== part);
      const targets = [...above, ...siblings];
      if (targets.length === 0) return undefined;
      return {
        name: `agent-floor-${part.name}`,
        severity: 'error',
        comment: `The agent's floors point down (${ORDER}): ${part.name} may import only its own floor and those below. Move the piece both need down a floor (a record or a file format into state/, a step of a load into load/), or move the importer up.`,
        from: { path: part.path },
        // ENTRY_FILES matches base too: base is the floor under all, never a target
        to: { path: targets.map((p) => p.path), pathNot: BASE_FILES },
      };
    }),
  ).filter(Boolean);
}

module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment:
        'A module cycle hides which layer depends on which: move the shared type or function to a module both can import.',
      from: {},
      to: { circular: true },
    },
    ...floorRules(),
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.lint.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
  },
};
