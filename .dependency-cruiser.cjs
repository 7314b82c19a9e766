// `pnpm lint`, second half: import cycles including type-only imports, which ESLint's
// import-x/no-cycle skips (the agent's load-images <-> pipeline and oci's auth <->
// credential-helper cycles were both type-only).
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'A module cycle hides which layer depends on which: move the shared type or function to a module both can import.',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.lint.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
  },
};
