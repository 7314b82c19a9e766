// Closing the agent's registry once the runtime has pulled everything: Go's HTTP client
// (containerd's) keeps connections that never carried a request and keep-alive ones whose
// request ended just after the close began. Node ends neither until its next connection
// check, 30 s on, and a load's Ready waited for that. Each case here would outlast tap's
// timeout before the fix; the server must end every connection itself.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { request, Agent } from 'node:http';
import { Readable } from 'node:stream';
import { startRegistry, type BlobStore, type Catalog } from '@offline-bundle/registry';

const blob = Buffer.from('a blob the registry serves');
const digest = `sha256:${'a'.repeat(64)}`;
// the store is not under test: a blob held in memory, answered once `release` is called
let release: () => void = () => {};
let opened: () => void = () => {};
const store: BlobStore = {
  size: (d) => (d === digest ? blob.length : undefined),
  open: async (_d, start, end) => {
    opened();
    await new Promise<void>((r) => {
      release = r;
    });
    return Readable.from([blob.subarray(start, end)]);
  },
  close: async () => {},
};
const catalog: Catalog = {
  repositories: new Map([['ns/app', new Map()]]),
  sources: new Map([['ns/app', 'ns/app']]),
  shortNames: new Map(),
  ambiguous: new Map(),
  manifests: new Map(),
  blobs: new Map([[digest, blob.length]]),
};

const closed = (s: Socket) =>
  new Promise<void>((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve())));

t.test(
  'a connection that never sent a request is ended by close()',
  { timeout: 15_000 },
  async (t) => {
    const reg = await startRegistry({ store, catalog });
    const [host, port] = reg.address.split(':');
    release = () => {};
    const s = connect(Number(port), host);
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    await reg.close();
    await closed(s);
    t.pass('the close resolved and the unused connection is gone');
  },
);

t.test(
  'a keep-alive connection whose request ends during close() is ended too',
  { timeout: 15_000 },
  async (t) => {
    const reg = await startRegistry({ store, catalog });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    t.teardown(() => agent.destroy());
    const get = () =>
      new Promise<{ status: number; body: string; socket: Socket }>((resolve, reject) => {
        const req = request(`http://${reg.address}/v2/ns/app/blobs/${digest}`, { agent }, (res) => {
          let body = '';
          res.setEncoding('latin1');
          res.on('data', (d) => {
            body += d;
          });
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, body, socket: req.socket as Socket }),
          );
        });
        req.on('error', reject);
        req.end();
      });
    const inStore = new Promise<void>((r) => {
      opened = r;
    });
    const answer = get();
    await inStore;
    // the close begins while the request is being answered; the answer completes after it
    const closing = reg.close();
    release();
    const first = await answer;
    t.equal(first.status, 200);
    t.equal(
      first.body,
      blob.toString('latin1'),
      'a request in progress at the close is answered in full',
    );
    // the agent unrefs a kept-alive socket: keep the test alive until the server ends it
    first.socket.ref();
    await closing;
    await closed(first.socket);
    t.pass('the connection that went idle during the close is gone once close() resolves');
  },
);

t.test(
  'a request still unanswered at close() is cut after the grace, not waited on',
  { timeout: 15_000 },
  async (t) => {
    const reg = await startRegistry({ store, catalog });
    const inStore = new Promise<void>((r) => {
      opened = r;
    });
    // the store never answers this one: `release` is not called
    const answer = new Promise<string>((resolve) => {
      const req = request(`http://${reg.address}/v2/ns/app/blobs/${digest}`, (res) =>
        resolve(`status ${res.statusCode}`),
      );
      req.on('error', (err) => resolve(err.message));
      req.end();
    });
    await inStore;
    await reg.close();
    t.match(await answer, /socket hang up|ECONNRESET/, 'the connection was cut by the close');
  },
);
