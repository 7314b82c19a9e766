// Shared bits of the runtime tests.
import { createRequire } from 'node:module';

/**
 * smol-toml is a dependency of @offline-bundle/runtime, not of the root package: resolve it
 * from there (an independent TOML parser for checking what the package renders).
 */
const requireFromRuntime = createRequire(
  new URL('../../packages/runtime/package.json', import.meta.url),
);
export const parseToml = (
  requireFromRuntime('smol-toml') as { parse: (s: string) => Record<string, unknown> }
).parse;

export interface Containerd {
  /** Temp dir holding config, root, state, socket (removed by stop()). */
  dir: string;
  /** containerd's gRPC socket (CRI answers here too). */
  socket: string;
  /** The CRI registry config_path (hosts.toml directories go here). */
  certsDir: string;
  pid: number;
  logs: () => string;
  stop: () => Promise<void>;
}

export { startContainerd } from '../helpers/containerd.mjs';
