// Which containerd answers on a socket, for what its CRI can report: the pinned label is
// honoured (and reported) from 1.6.22 (backported from 1.7, fixed further in 1.6.26); before,
// containerd stores it and reports every image unpinned.
import { fileURLToPath } from 'node:url';
import type * as grpc from '@grpc/grpc-js';
import { connect, lazyService, unaryCall, type UnaryMethod } from './grpc-service.js';

export const CONTAINERD_VERSION_PROTO_PATH = fileURLToPath(
  new URL('../proto/containerd-version.proto', import.meta.url),
);

interface VersionStub extends grpc.Client {
  Version: UnaryMethod<{ version?: string }>;
}
const versionService = lazyService<VersionStub>(
  CONTAINERD_VERSION_PROTO_PATH,
  ['containerd', 'services', 'version', 'v1', 'Version'],
  {},
);

/** containerd's own version string ("v1.7.13", "1.6.20~ds1" as Debian builds it). */
export async function containerdVersion(address: string, timeoutMs = 2_000): Promise<string> {
  const stub = connect(versionService(), address);
  try {
    const res = await unaryCall(
      stub.Version.bind(stub),
      {},
      { what: 'containerd version', who: 'containerd', timeoutMs, fallback: 'CRI_ERROR' },
    );
    return res.version ?? '';
  } finally {
    stub.close();
  }
}

/** Whether this containerd's CRI may report pins (1.6.22 and later); undefined for a version it cannot read. */
export function containerdReportsPins(version: string): boolean | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version.trim());
  if (!m) return undefined;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  return major > 1 || (major === 1 && (minor > 6 || (minor === 6 && patch >= 22)));
}
