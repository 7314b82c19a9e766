// `pnpm lint` (also in .ci/run): the rules that keep the code readable as it grows (#26).
// - no import cycles, and the agent's folders only import down their floors:
//   .dependency-cruiser.cjs (it sees type-only imports, which ESLint's import-x/no-cycle skips);
// - a ceiling on function length in shipped code, counted at the formatted width (prettier,
//   100 columns, checked first by `pnpm lint`), with no exemption;
// - typescript-eslint's recommended set.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

const MAX_FUNCTION_LINES = 80;

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
