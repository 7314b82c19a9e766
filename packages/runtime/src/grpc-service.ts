// The runtime's gRPC services (CRI's ImageService, containerd's images and version): one way
// to load a client class from a .proto that ships beside dist/, and one way to make a unary
// call with a deadline, a cancel and a one-line error.
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { RuntimeError, firstLine, type RuntimeErrorCode } from './errors.js';

/** The gRPC target for a socket path ("/run/crio/crio.sock" or "unix:///run/...") */
function grpcTarget(socketPath: string): string {
  if (socketPath.startsWith('unix:')) return socketPath;
  if (!socketPath.startsWith('/')) {
    throw new RuntimeError(
      'INVALID_SPEC',
      `CRI socket path must be absolute: ${JSON.stringify(socketPath)}`,
    );
  }
  return `unix://${socketPath}`;
}

const NO_SPACE_RE = /no space left on device|\bENOSPC\b|disk quota exceeded/i;

/** Map a gRPC failure to a RuntimeError with a one-line message. */
function criError(err: unknown, what: string, fallback: RuntimeErrorCode): RuntimeError {
  const e = err as Partial<grpc.ServiceError> | undefined;
  // grpc-js appends an empty "Resolution note:" to connection errors.
  const details =
    firstLine(String(e?.details || e?.message || err)).replace(/\s*Resolution note:\s*$/, '') ||
    'unknown error';
  let code: RuntimeErrorCode;
  if (
    e?.code === grpc.status.RESOURCE_EXHAUSTED ||
    NO_SPACE_RE.test(String(e?.details ?? e?.message ?? ''))
  )
    code = 'NO_SPACE';
  else if (e?.code === grpc.status.UNAVAILABLE) code = 'RUNTIME_UNAVAILABLE';
  else if (e?.code === grpc.status.NOT_FOUND) code = 'IMAGE_NOT_FOUND';
  else if (e?.code === grpc.status.DEADLINE_EXCEEDED) code = 'TIMEOUT';
  else code = fallback;
  return new RuntimeError(code, `${what}: ${details}`, { cause: err });
}

type Callback<T> = (err: grpc.ServiceError | null, res?: T) => void;
export type UnaryMethod<T> = (
  req: object,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: Callback<T>,
) => grpc.ClientUnaryCall;
type ServiceCtor<S> = new (
  address: string,
  creds: grpc.ChannelCredentials,
  options?: grpc.ClientOptions,
) => S;

/**
 * The client class of the service at `path` (package names, then the service) in `protoPath`,
 * loaded at first use: a process that never talks to that service never parses its .proto.
 */
export function lazyService<S extends grpc.Client>(
  protoPath: string,
  path: string[],
  options: protoLoader.Options,
): () => ServiceCtor<S> {
  let ctor: ServiceCtor<S> | undefined;
  return () => {
    if (!ctor) {
      let node: unknown = grpc.loadPackageDefinition(
        protoLoader.loadSync(protoPath, { keepCase: false, defaults: true, ...options }),
      );
      for (const name of path) node = (node as Record<string, unknown>)[name];
      ctor = node as ServiceCtor<S>;
    }
    return ctor;
  };
}

/** A client of that service on a unix socket, retries off: they are the caller's business (backoff, a NO_SPACE stop). */
export function connect<S extends grpc.Client>(ctor: ServiceCtor<S>, socketPath: string): S {
  return new ctor(grpcTarget(socketPath), grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.enable_retries': 0,
  });
}

interface UnaryCallOptions {
  /** Names the call in errors ("pull quay.io/x:1", "containerd version"). */
  what: string;
  /** Names who did not answer in a missed deadline's message ("containerd"). */
  who?: string;
  timeoutMs: number;
  /** The code of a failure criError does not classify. */
  fallback: RuntimeErrorCode;
  metadata?: grpc.Metadata;
  /** Aborting cancels the call; it then fails with `cancelledCode`. */
  signal?: AbortSignal;
  cancelledCode?: RuntimeErrorCode;
}

/** One unary call: a deadline missed is TIMEOUT, a cancel `cancelledCode`, anything else criError's. */
export function unaryCall<T>(
  method: UnaryMethod<T>,
  req: object,
  opts: UnaryCallOptions,
): Promise<T> {
  const { what, timeoutMs, signal } = opts;
  const cancelled = (cause: unknown) =>
    new RuntimeError(opts.cancelledCode ?? opts.fallback, `${what}: cancelled`, { cause });
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted) return reject(cancelled(signal.reason));
    // the abort listener is added only once `call` exists
    const onAbort = (): void => call.cancel();
    const call = method(
      req,
      opts.metadata ?? new grpc.Metadata(),
      { deadline: Date.now() + timeoutMs },
      (err, res) => {
        signal?.removeEventListener('abort', onAbort);
        if (!err) resolve(res as T);
        else if (err.code === grpc.status.CANCELLED && signal?.aborted) reject(cancelled(err));
        else if (err.code === grpc.status.DEADLINE_EXCEEDED)
          reject(
            new RuntimeError(
              'TIMEOUT',
              `${what}: ${opts.who ? `${opts.who} did not answer` : 'no answer'} within ${Math.round(timeoutMs / 1000)} s`,
              { cause: err },
            ),
          );
        else reject(criError(err, what, opts.fallback));
      },
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
