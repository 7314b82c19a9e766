// What containerd's CRI says of its own configuration, read before anything is written: the
// CRI plugin's registry `config_path` decides whether the hosts.toml files under certs.d are
// read at all. containerd 1.x ships it empty (Debian's package too), and then every pull goes
// to the real registry whatever certs.d holds.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as grpc from '@grpc/grpc-js';
import { connect, lazyService, unaryCall, type UnaryMethod } from './grpc-service.js';

export const CRI_RUNTIME_PROTO_PATH = fileURLToPath(
  new URL('../proto/cri-runtime.proto', import.meta.url),
);

interface RuntimeServiceStub extends grpc.Client {
  Status: UnaryMethod<{ info?: Record<string, string> }>;
}
const runtimeService = lazyService<RuntimeServiceStub>(
  CRI_RUNTIME_PROTO_PATH,
  ['runtime', 'v1', 'RuntimeService'],
  {},
);

/** CRI Status with verbose set (`crictl info`): the runtime's info map, each value a JSON text. */
export async function criStatusInfo(
  socketPath: string,
  timeoutMs = 5_000,
): Promise<Record<string, string>> {
  const stub = connect(runtimeService(), socketPath);
  try {
    const res = await unaryCall(
      stub.Status.bind(stub),
      { verbose: true },
      { what: 'runtime status', who: 'the runtime', timeoutMs, fallback: 'CRI_ERROR' },
    );
    return { ...(res.info ?? {}) };
  } finally {
    stub.close();
  }
}

/**
 * The CRI registry config_path from a Status info map: a string ('' when unset), or undefined
 * when the answer does not carry it (no `config`, or a layout without `registry.configPath`,
 * as a containerd whose registry settings live in another plugin).
 */
export function registryConfigPath(info: Record<string, string>): string | undefined {
  if (typeof info.config !== 'string') return undefined;
  let config: unknown;
  try {
    config = JSON.parse(info.config);
  } catch {
    return undefined;
  }
  const registry = (config as { registry?: unknown } | null)?.registry;
  const value = (registry as { configPath?: unknown } | null | undefined)?.configPath;
  return typeof value === 'string' ? value : undefined;
}

/** `dir` as the runtime names it: without `root` (a DaemonSet's /host), which the runtime does not see; `dir` itself when outside `root`. */
export function hostPath(dir: string, root: string): string {
  const rel = path.relative(path.resolve(root), path.resolve(dir));
  return rel.startsWith('..') || path.isAbsolute(rel) ? dir : path.resolve('/', rel);
}

/**
 * Whether containerd, with this config_path (a list joined by ':', as Go's filepath.SplitList
 * reads it), looks for hosts.toml files in `certsDir`. `root`: where the host's / is seen from
 * the caller (a DaemonSet's /host); containerd names its paths from its own /, so both
 * `certsDir` and `certsDir` without `root` count.
 */
export function configPathReads(configPath: string, certsDir: string, root = '/'): boolean {
  const wanted = new Set([path.resolve(certsDir), path.resolve(hostPath(certsDir, root))]);
  // the agent in a chroot or container that sees the node's files under its root (root /node):
  // containerd names the same directory from outside, ending in the agent's whole path
  const inside = path.resolve(root) !== '/' ? path.resolve(certsDir) : undefined;
  return configPath
    .split(':')
    .map((p) => p.trim())
    .filter((p) => p !== '')
    .some(
      (p) =>
        wanted.has(path.resolve('/', p)) ||
        (inside !== undefined &&
          path.resolve('/', p).endsWith(inside) &&
          path.resolve('/', p) !== inside),
    );
}
