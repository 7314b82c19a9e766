// containerd's own image metadata service (containerd.services.images.v1) on its gRPC socket:
// what `ctr images ls` and `ctr images label` do, without a process start per image record
// (a release has a hundred or more records, and each ctr start costs tens of milliseconds).
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { RuntimeError } from './errors.js';
import { connect, lazyService, unaryCall, type UnaryMethod } from './grpc-service.js';

const CONTAINERD_IMAGES_PROTO_PATH = fileURLToPath(
  new URL('../proto/containerd-images.proto', import.meta.url),
);

export interface ContainerdImageRecord {
  name: string;
  /** The record's target (manifest or index) digest. */
  digest: string;
  labels: Record<string, string>;
}

interface RawImage {
  name?: string;
  labels?: Record<string, string>;
  target?: { digest?: string } | null;
}
interface ImagesStub extends grpc.Client {
  List: UnaryMethod<{ images?: RawImage[] }>;
  Update: UnaryMethod<{ image?: RawImage }>;
}
const imagesService = lazyService<ImagesStub>(
  CONTAINERD_IMAGES_PROTO_PATH,
  ['containerd', 'services', 'images', 'v1', 'Images'],
  { longs: String },
);

interface ContainerdImagesOptions {
  /** containerd's namespace; CRI's is 'k8s.io'. */
  namespace?: string;
  /** Deadline of each call. Default 30 s. */
  callTimeoutMs?: number;
}

export class ContainerdImagesClient {
  readonly #stub: ImagesStub;
  readonly #md = new grpc.Metadata();
  readonly #timeoutMs: number;

  constructor(
    readonly socketPath: string,
    opts: ContainerdImagesOptions = {},
  ) {
    this.#timeoutMs = opts.callTimeoutMs ?? 30_000;
    // containerd scopes every metadata call by this header
    this.#md.set('containerd-namespace', opts.namespace ?? 'k8s.io');
    this.#stub = connect(imagesService(), socketPath);
  }

  #call<T>(method: 'List' | 'Update', req: object, what: string): Promise<T> {
    const fn = this.#stub[method].bind(this.#stub) as UnaryMethod<T>;
    return unaryCall(fn, req, {
      what,
      timeoutMs: this.#timeoutMs,
      metadata: this.#md,
      who: 'containerd',
      fallback: 'PIN_FAILED',
    });
  }

  /** Every image record of the namespace. */
  async list(): Promise<ContainerdImageRecord[]> {
    const res = await this.#call<{ images?: RawImage[] }>(
      'List',
      { filters: [] },
      'list containerd images',
    );
    return (res.images ?? [])
      .map((i) => ({
        name: i.name ?? '',
        digest: i.target?.digest ?? '',
        labels: { ...(i.labels ?? {}) },
      }))
      .filter((i) => i.name && i.digest);
  }

  /** Sets one label of the record `name` (`value` undefined removes it), leaving the others. */
  async setLabel(
    name: string,
    key: string,
    value: string | undefined,
    what: string,
  ): Promise<void> {
    // containerd 1.7 reads the request's target even for a masked update, and a missing one is a
    // nil dereference that crashes the daemon (1.6 did not): send the record's own target
    const found = await this.#call<{ images?: RawImage[] }>(
      'List',
      { filters: [`name==${JSON.stringify(name)}`] },
      what,
    );
    const target = found.images?.find((i) => i.name === name)?.target;
    if (!target?.digest)
      throw new RuntimeError('IMAGE_NOT_FOUND', `${what}: containerd has no image of that name`);
    // a masked update touches only that label; a label absent from the image is removed
    const image = { name, target, labels: value === undefined ? {} : { [key]: value } };
    await this.#call('Update', { image, updateMask: { paths: [`labels.${key}`] } }, what);
  }

  close(): void {
    this.#stub.close();
  }
}
