// Minimal CRI ImageService client (runtime.v1) over the runtime's unix socket, for CRI-O
// and containerd alike. The .proto ships in ../proto/ next to dist/ and src/.
import { fileURLToPath } from 'node:url';
import type * as grpc from '@grpc/grpc-js';
import { connect, lazyService, unaryCall, type UnaryMethod } from './grpc-service.js';
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
interface ImageServiceStub extends grpc.Client {
  PullImage: UnaryMethod<{ imageRef?: string }>;
  ImageStatus: UnaryMethod<{ image?: RawImage | null }>;
  ListImages: UnaryMethod<{ images?: RawImage[] }>;
  ImageFsInfo: UnaryMethod<{
    imageFilesystems?: RawFsUsage[];
    containerFilesystems?: RawFsUsage[];
  }>;
}
const imageService = lazyService<ImageServiceStub>(
  CRI_PROTO_PATH,
  ['runtime', 'v1', 'ImageService'],
  { longs: String, enums: String, oneofs: true },
);

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

export class CriImageClient implements ImagePuller {
  readonly socketPath: string;
  readonly #stub: ImageServiceStub;
  readonly #callTimeoutMs: number;

  constructor(socketPath: string, opts: CriImageClientOptions = {}) {
    this.socketPath = socketPath;
    this.#callTimeoutMs = opts.callTimeoutMs ?? 30_000;
    this.#stub = connect(imageService(), socketPath);
  }

  #call<T>(
    method: 'PullImage' | 'ImageStatus' | 'ListImages' | 'ImageFsInfo',
    req: object,
    what: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<T> {
    const fn = this.#stub[method].bind(this.#stub) as UnaryMethod<T>;
    return unaryCall(fn, req, {
      what,
      timeoutMs,
      signal,
      fallback: method === 'PullImage' ? 'PULL_FAILED' : 'CRI_ERROR',
      cancelledCode: 'PULL_FAILED',
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
    const res = await this.#call<{ images?: RawImage[] }>(
      'ListImages',
      {},
      'list images',
      this.#callTimeoutMs,
    );
    return (res.images ?? []).map(toImage);
  }

  /** ImageFsInfo: usage of the filesystem(s) holding the image store. */
  async imageFsInfo(): Promise<ImageFsInfo> {
    const res = await this.#call<{
      imageFilesystems?: RawFsUsage[];
      containerFilesystems?: RawFsUsage[];
    }>('ImageFsInfo', {}, 'image filesystem info', this.#callTimeoutMs);
    return {
      imageFilesystems: (res.imageFilesystems ?? []).map(toFsUsage),
      containerFilesystems: (res.containerFilesystems ?? []).map(toFsUsage),
    };
  }

  close(): void {
    this.#stub.close();
  }
}
