// Minimal CRI ImageService client (runtime.v1) over the runtime's unix socket, for CRI-O
// and containerd alike. The .proto ships in ../proto/ next to dist/ and src/.
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { RuntimeError, firstLine, type RuntimeErrorCode } from './errors.js';
import { assertImageRef } from './validate.js';

export const CRI_PROTO_PATH = fileURLToPath(new URL('../proto/cri-image.proto', import.meta.url));

/** An image as the runtime reports it. */
export interface CriImage {
  /** Image ID (for containerd and CRI-O: the config digest, "sha256:..."). */
  id: string;
  repoTags: string[];
  /** "registry/repo@sha256:..." names by which the image is known. */
  repoDigests: string[];
  /** Bytes the image takes (as the runtime counts them). */
  size: number;
  /** The runtime's garbage-collection exemption for this image. */
  pinned: boolean;
}

export interface FilesystemUsage {
  mountpoint: string;
  usedBytes: number | null;
  inodesUsed: number | null;
  /** Nanoseconds since the epoch, as a string (int64). */
  timestamp: string;
}

export interface ImageFsInfo {
  imageFilesystems: FilesystemUsage[];
  containerFilesystems: FilesystemUsage[];
}

export interface PullImageOptions {
  /** Deadline of the whole PullImage call. Default 30 minutes. */
  timeoutMs?: number;
  /** Aborting cancels the call (the runtime may still finish the pull on its own). */
  signal?: AbortSignal;
}

export interface CriImageClientOptions {
  /** Deadline of ImageStatus, ListImages and ImageFsInfo calls. Default 30 s. */
  callTimeoutMs?: number;
}

/** The CriImageClient surface pullAll needs: lets the loop be driven by anything CRI-like. */
export interface ImagePuller {
  pullImage(ref: string, opts?: PullImageOptions): Promise<string>;
}

interface RawImage {
  id?: string;
  repoTags?: string[];
  repoDigests?: string[];
  size?: string | number;
  pinned?: boolean;
}
interface RawFsUsage {
  timestamp?: string | number;
  fsId?: { mountpoint?: string } | null;
  usedBytes?: { value?: string | number } | null;
  inodesUsed?: { value?: string | number } | null;
}
type Callback<T> = (err: grpc.ServiceError | null, res?: T) => void;
interface ImageServiceStub extends grpc.Client {
  PullImage(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<{ imageRef?: string }>): grpc.ClientUnaryCall;
  ImageStatus(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<{ image?: RawImage | null }>): grpc.ClientUnaryCall;
  ListImages(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<{ images?: RawImage[] }>): grpc.ClientUnaryCall;
  ImageFsInfo(
    req: object,
    md: grpc.Metadata,
    opts: grpc.CallOptions,
    cb: Callback<{ imageFilesystems?: RawFsUsage[]; containerFilesystems?: RawFsUsage[] }>,
  ): grpc.ClientUnaryCall;
}
type ImageServiceCtor = new (address: string, creds: grpc.ChannelCredentials, options?: grpc.ClientOptions) => ImageServiceStub;

let ctor: ImageServiceCtor | undefined;
function imageServiceCtor(): ImageServiceCtor {
  if (!ctor) {
    const def = protoLoader.loadSync(CRI_PROTO_PATH, { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { runtime: { v1: { ImageService: ImageServiceCtor } } };
    ctor = pkg.runtime.v1.ImageService;
  }
  return ctor;
}

const NO_SPACE_RE = /no space left on device|\bENOSPC\b|disk quota exceeded/i;

/** Map a gRPC failure to a RuntimeError with a one-line message. */
export function criError(err: unknown, what: string, fallback: RuntimeErrorCode): RuntimeError {
  const e = err as Partial<grpc.ServiceError> | undefined;
  // grpc-js appends an empty "Resolution note:" to connection errors.
  const details = firstLine(String(e?.details || e?.message || err)).replace(/\s*Resolution note:\s*$/, '') || 'unknown error';
  let code: RuntimeErrorCode;
  if (e?.code === grpc.status.RESOURCE_EXHAUSTED || NO_SPACE_RE.test(String(e?.details ?? e?.message ?? ''))) code = 'NO_SPACE';
  else if (e?.code === grpc.status.UNAVAILABLE) code = 'RUNTIME_UNAVAILABLE';
  else if (e?.code === grpc.status.NOT_FOUND) code = 'IMAGE_NOT_FOUND';
  else if (e?.code === grpc.status.DEADLINE_EXCEEDED) code = 'TIMEOUT';
  else code = fallback;
  return new RuntimeError(code, `${what}: ${details}`, { cause: err });
}

function toNumber(v: string | number | undefined | null): number {
  if (v === undefined || v === null || v === '') return 0;
  return typeof v === 'number' ? v : Number(v);
}

function toImage(raw: RawImage): CriImage {
  return {
    id: raw.id ?? '',
    repoTags: [...(raw.repoTags ?? [])],
    repoDigests: [...(raw.repoDigests ?? [])],
    size: toNumber(raw.size),
    pinned: raw.pinned === true,
  };
}

function toFsUsage(raw: RawFsUsage): FilesystemUsage {
  return {
    mountpoint: raw.fsId?.mountpoint ?? '',
    usedBytes: raw.usedBytes ? toNumber(raw.usedBytes.value) : null,
    inodesUsed: raw.inodesUsed ? toNumber(raw.inodesUsed.value) : null,
    timestamp: String(raw.timestamp ?? '0'),
  };
}

/** The gRPC target for a socket path ("/run/crio/crio.sock" or "unix:///run/...") */
export function grpcTarget(socketPath: string): string {
  if (socketPath.startsWith('unix:')) return socketPath;
  if (!socketPath.startsWith('/')) {
    throw new RuntimeError('INVALID_SPEC', `CRI socket path must be absolute: ${JSON.stringify(socketPath)}`);
  }
  return `unix://${socketPath}`;
}

export class CriImageClient implements ImagePuller {
  readonly socketPath: string;
  readonly #stub: ImageServiceStub;
  readonly #callTimeoutMs: number;

  constructor(socketPath: string, opts: CriImageClientOptions = {}) {
    this.socketPath = socketPath;
    this.#callTimeoutMs = opts.callTimeoutMs ?? 30_000;
    const Ctor = imageServiceCtor();
    this.#stub = new Ctor(grpcTarget(socketPath), grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
      // Retries are pullAll's business (with backoff and a NO_SPACE stop), not the channel's.
      'grpc.enable_retries': 0,
    });
  }

  #call<T>(
    method: 'PullImage' | 'ImageStatus' | 'ListImages' | 'ImageFsInfo',
    req: object,
    what: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (signal?.aborted) {
        reject(new RuntimeError('PULL_FAILED', `${what}: cancelled`, { cause: signal.reason }));
        return;
      }
      const pull = method === 'PullImage';
      // the abort listener is added only once `call` exists
      const onAbort = (): void => call.cancel();
      const fn = this.#stub[method].bind(this.#stub) as (
        r: object,
        md: grpc.Metadata,
        o: grpc.CallOptions,
        cb: Callback<T>,
      ) => grpc.ClientUnaryCall;
      const call = fn(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
        signal?.removeEventListener('abort', onAbort);
        if (err) {
          if (err.code === grpc.status.CANCELLED && signal?.aborted) {
            reject(new RuntimeError('PULL_FAILED', `${what}: cancelled`, { cause: err }));
          } else if (err.code === grpc.status.DEADLINE_EXCEEDED) {
            reject(new RuntimeError('TIMEOUT', `${what}: no answer within ${Math.round(timeoutMs / 1000)} s`, { cause: err }));
          } else {
            reject(criError(err, what, pull ? 'PULL_FAILED' : 'CRI_ERROR'));
          }
        } else {
          resolve(res as T);
        }
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** PullImage; resolves to the runtime's image reference (containerd/CRI-O: the image ID). */
  async pullImage(ref: string, opts: PullImageOptions = {}): Promise<string> {
    assertImageRef(ref);
    const res = await this.#call<{ imageRef?: string }>(
      'PullImage',
      { image: { image: ref } },
      `pull ${ref}`,
      opts.timeoutMs ?? 30 * 60_000,
      opts.signal,
    );
    return res.imageRef ?? '';
  }

  /** ImageStatus; null when the runtime does not have the image. */
  async imageStatus(ref: string): Promise<CriImage | null> {
    assertImageRef(ref);
    const res = await this.#call<{ image?: RawImage | null }>(
      'ImageStatus',
      { image: { image: ref }, verbose: false },
      `image status ${ref}`,
      this.#callTimeoutMs,
    );
    return res.image ? toImage(res.image) : null;
  }

  /** ListImages (all images, no filter). */
  async listImages(): Promise<CriImage[]> {
    const res = await this.#call<{ images?: RawImage[] }>('ListImages', {}, 'list images', this.#callTimeoutMs);
    return (res.images ?? []).map(toImage);
  }

  /** ImageFsInfo: usage of the filesystem(s) holding the image store. */
  async imageFsInfo(): Promise<ImageFsInfo> {
    const res = await this.#call<{ imageFilesystems?: RawFsUsage[]; containerFilesystems?: RawFsUsage[] }>(
      'ImageFsInfo',
      {},
      'image filesystem info',
      this.#callTimeoutMs,
    );
    return {
      imageFilesystems: (res.imageFilesystems ?? []).map(toFsUsage),
      containerFilesystems: (res.containerFilesystems ?? []).map(toFsUsage),
    };
  }

  close(): void {
    this.#stub.close();
  }
}
