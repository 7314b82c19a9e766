// Which containerd answers on a socket, for what its CRI can report: the pinned label is
// honoured (and reported) from 1.6.22 (backported from 1.7, fixed further in 1.6.26); before,
// containerd stores it and reports every image unpinned.
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { criError, grpcTarget } from './cri-client.js';
import { RuntimeError } from './errors.js';

export const CONTAINERD_VERSION_PROTO_PATH = fileURLToPath(new URL('../proto/containerd-version.proto', import.meta.url));

interface VersionStub extends grpc.Client {
  Version(req: object, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { version?: string }) => void): grpc.ClientUnaryCall;
}
type VersionCtor = new (address: string, creds: grpc.ChannelCredentials, options?: grpc.ClientOptions) => VersionStub;

let ctor: VersionCtor | undefined;
function versionCtor(): VersionCtor {
  if (!ctor) {
    const def = protoLoader.loadSync(CONTAINERD_VERSION_PROTO_PATH, { keepCase: false, defaults: true });
    ctor = (grpc.loadPackageDefinition(def) as unknown as { containerd: { services: { version: { v1: { Version: VersionCtor } } } } }).containerd.services.version.v1.Version;
  }
  return ctor;
}

/** containerd's own version string ("v1.7.13", "1.6.20~ds1" as Debian builds it). */
export async function containerdVersion(address: string, timeoutMs = 2_000): Promise<string> {
  const stub = new (versionCtor())(grpcTarget(address), grpc.credentials.createInsecure(), { 'grpc.enable_retries': 0 });
  try {
    return await new Promise<string>((resolve, reject) => {
      stub.Version({}, { deadline: Date.now() + timeoutMs }, (err, res) => {
        if (!err) return resolve(res?.version ?? '');
        if (err.code === grpc.status.DEADLINE_EXCEEDED) reject(new RuntimeError('TIMEOUT', `containerd version: no answer within ${Math.round(timeoutMs / 1000)} s`, { cause: err }));
        else reject(criError(err, 'containerd version', 'CRI_ERROR'));
      });
    });
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
