// `pnpm lint` (also in .ci/run): the rules that keep the code readable as it grows (#26).
// - no import cycles, and the agent's folders only import down their floors:
//   .dependency-cruiser.cjs (it sees type-only imports, which ESLint's import-x/no-cycle skips);
// - a ceiling on function length in shipped code, with the few functions still over it named
//   below (each a phase-split waiting to happen, not a licence);
// - typescript-eslint's recommended set.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

const MAX_FUNCTION_LINES = 80;

// Over the ceiling at the formatted width (prettier, 100 columns) when the formatter came in (#41);
// remove an entry when its function is split along its phases. Whole files, so keep it short.
const LONG_FUNCTIONS = [
  'agent/src/cli.ts',
  'agent/src/daemon/daemon.ts',
  'agent/src/load/load-images.ts',
  'agent/src/load/pipeline.ts',
  'agent/src/man.ts',
  'agent/src/self-upgrade/self-upgrade.ts',
  'builder/src/cli.ts',
  'builder/src/cluster-approve.ts',
  'builder/src/cluster.ts',
  'builder/src/create.ts',
  'builder/src/man.ts',
  'builder/src/write-media-command.ts',
  'packages/cluster/src/cluster-rollup.ts',
  'packages/cluster/src/pinned-image-sets.ts',
  'packages/format/src/extract-resume.ts',
  'packages/format/src/manifest.ts',
  'packages/format/src/writer.ts',
  'packages/image-fetch/src/blob-cache.ts',
  'packages/image-fetch/src/docker-archive-source.ts',
  'packages/registry/src/server.ts',
  'packages/runtime/src/pull-all.ts',
  'packages/status/src/http.ts',
  'packages/status/src/metrics-listener.ts',
  'packages/status/src/metrics.ts',
  'packages/status/src/summary.ts',
  'scripts/outputs-snapshot.mjs',
];

export default tseslint.config(
  // test/fixtures/frozen-reader: an earlier commit's reader, built by scripts/freeze-reader.mjs
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      'bench/results/**',
      '**/*.d.ts',
      'deploy/**/*.yaml',
      'test/fixtures/frozen-reader/*.mjs',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
      // a closure that reads the variable before its one assignment (cleanup set up first) stays `let`
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // ANSI escapes are matched on purpose (terminal output is stripped and checked).
      'no-control-regex': 'off',
    },
  },
  {
    files: [
      'packages/*/src/**/*.ts',
      'agent/src/**/*.ts',
      'builder/src/**/*.ts',
      'scripts/**/*.mjs',
    ],
    ignores: LONG_FUNCTIONS,
    rules: {
      'max-lines-per-function': [
        'error',
        { max: MAX_FUNCTION_LINES, skipBlankLines: true, skipComments: true },
      ],
    },
  },
  {
    // Tests describe scenarios step by step and shape API objects loosely.
    files: ['test/**', 'bench/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
