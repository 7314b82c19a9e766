// containerd's own image metadata service (containerd.services.images.v1) on its gRPC socket:
// what `ctr images ls` and `ctr images label` do, without a process start per image record
// (a release has a hundred or more records, and each ctr start costs tens of milliseconds).
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { criError, grpcTarget } from './cri-client.js';
import { RuntimeError } from './errors.js';

export const CONTAINERD_IMAGES_PROTO_PATH = fileURLToPath(new URL('../proto/containerd-images.proto', import.meta.url));

export interface ContainerdImageRecord {
  name: string;
  /** The record's target (manifest or index) digest. */
  digest: string;
  labels: Record<string, string>;
}

interface RawImage { name?: string; labels?: Record<string, string>; target?: { digest?: string } | null }
type Callback<T> = (err: grpc.ServiceError | null, res?: T) => void;
interface ImagesStub extends grpc.Client {
  List(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<{ images?: RawImage[] }>): grpc.ClientUnaryCall;
  Update(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<{ image?: RawImage }>): grpc.ClientUnaryCall;
}
type ImagesCtor = new (address: string, creds: grpc.ChannelCredentials, options?: grpc.ClientOptions) => ImagesStub;

let ctor: ImagesCtor | undefined;
function imagesCtor(): ImagesCtor {
  if (!ctor) {
    const def = protoLoader.loadSync(CONTAINERD_IMAGES_PROTO_PATH, { keepCase: false, longs: String, defaults: true });
    ctor = (grpc.loadPackageDefinition(def) as unknown as { containerd: { services: { images: { v1: { Images: ImagesCtor } } } } }).containerd.services.images.v1.Images;
  }
  return ctor;
}

export interface ContainerdImagesOptions {
  /** containerd's namespace; CRI's is 'k8s.io'. */
  namespace?: string;
  /** Deadline of each call. Default 30 s. */
  callTimeoutMs?: number;
}

export class ContainerdImagesClient {
  readonly #stub: ImagesStub;
  readonly #md = new grpc.Metadata();
  readonly #timeoutMs: number;

  constructor(readonly socketPath: string, opts: ContainerdImagesOptions = {}) {
    this.#timeoutMs = opts.callTimeoutMs ?? 30_000;
    // containerd scopes every metadata call by this header
    this.#md.set('containerd-namespace', opts.namespace ?? 'k8s.io');
    this.#stub = new (imagesCtor())(grpcTarget(socketPath), grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
      'grpc.enable_retries': 0,
    });
  }

  #call<T>(method: 'List' | 'Update', req: object, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const fn = this.#stub[method].bind(this.#stub) as (r: object, md: grpc.Metadata, o: grpc.CallOptions, cb: Callback<T>) => grpc.ClientUnaryCall;
      fn(req, this.#md, { deadline: Date.now() + this.#timeoutMs }, (err, res) => {
        if (!err) return resolve(res as T);
        if (err.code === grpc.status.DEADLINE_EXCEEDED) reject(new RuntimeError('TIMEOUT', `${what}: containerd did not answer within ${Math.round(this.#timeoutMs / 1000)} s`, { cause: err }));
        else reject(criError(err, what, 'PIN_FAILED'));
      });
    });
  }

  /** Every image record of the namespace. */
  async list(): Promise<ContainerdImageRecord[]> {
    const res = await this.#call<{ images?: RawImage[] }>('List', { filters: [] }, 'list containerd images');
    return (res.images ?? []).map((i) => ({ name: i.name ?? '', digest: i.target?.digest ?? '', labels: { ...(i.labels ?? {}) } })).filter((i) => i.name && i.digest);
  }

  /** Sets one label of the record `name` (`value` undefined removes it), leaving the others. */
  async setLabel(name: string, key: string, value: string | undefined, what: string): Promise<void> {
    // containerd 1.7 reads the request's target even for a masked update, and a missing one is a
    // nil dereference that crashes the daemon (1.6 did not): send the record's own target
    const found = await this.#call<{ images?: RawImage[] }>('List', { filters: [`name==${JSON.stringify(name)}`] }, what);
    const target = found.images?.find((i) => i.name === name)?.target;
    if (!target?.digest) throw new RuntimeError('IMAGE_NOT_FOUND', `${what}: containerd has no image of that name`);
    // a masked update touches only that label; a label absent from the image is removed
    const image = { name, target, labels: value === undefined ? {} : { [key]: value } };
    await this.#call('Update', { image, updateMask: { paths: [`labels.${key}`] } }, what);
  }

  close(): void {
    this.#stub.close();
  }
}
