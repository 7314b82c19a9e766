// Hostile stand-in for the Kubernetes API server (plain http on 127.0.0.1): it answers every
// request the way one attack does, so each of `bundle cluster`'s commands can be held to end
// within its deadline with one line naming the server and the cause. A real API server never
// answers like this; the refusals are what the client must do with a proxy, a console page, a
// wrong kubeconfig or a hostile server in its place.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { gzipSync } from 'node:zlib';

export type Attack =
  | 'huge' // a 200 OK JSON node list of one node that never ends (streams until the client hangs up)
  | 'silent' // accepts the connection, reads the request, never answers
  | 'trickle' // headers at once, then one byte of body every second, forever
  | 'redirect' // 302 to another server (`elsewhere`), which serves a node list of its own
  | 'self-redirect' // 302 to the same path with ?r=1 on this server, then a correct empty answer
  | 'html-json' // a correct JSON body served as text/html
  | 'html-page' // an HTML login page, 200 OK
  | 'deep' // a JSON list whose item nests 1,000,000 arrays deep
  | 'paged' // a correct list of 1,200 Ready nodes, in pages of ?limit= with continue tokens
  | 'endless-pages' // one node per page, and always another continue token
  | 'many-items' // limit= ignored: one 200 OK page of 21,000,000 empty items (60 MiB, under the byte bound)
  | 'slow-pages' // each page after 2 s, one node, and always another continue token
  | 'long-message' // 500 with a Status whose message is 50 MiB over many lines
  | 'gzip' // 200 OK, application/json, but the body gzip-encoded (never asked for)
  | 'empty-json'; // 200 OK, application/json, no body

const NODE = JSON.stringify({
  metadata: { name: 'node-x'.padEnd(200, 'x') },
  status: { conditions: [{ type: 'Ready', status: 'True' }] },
});
/** The 'long-message' answer, made once (50 MiB). */
let longMessage: string | undefined;
const EMPTY_LIST = JSON.stringify({ apiVersion: 'v1', kind: 'List', metadata: {}, items: [] });

export class HostileApi {
  attack: Attack = 'silent';
  port = 0;
  /** Where 'redirect' sends the client: a second server answering a plausible node list. */
  elsewhere?: Server;
  elsewherePort = 0;
  /** Requests the other server received: must stay 0. */
  elsewhereHits = 0;
  /** List pages served ('paged', 'endless-pages'). */
  pages = 0;
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();

  static async start(): Promise<HostileApi> {
    const h = new HostileApi();
    h.server = createServer((req, res) => h.answer(req.url ?? '/', res));
    h.elsewhere = createServer((_req, res) => {
      h.elsewhereHits++;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ kind: 'NodeList', metadata: {}, items: [JSON.parse(NODE)] }));
    });
    for (const s of [h.server, h.elsewhere])
      s.on('connection', (c: Socket) => {
        h.sockets.add(c);
        c.on('close', () => h.sockets.delete(c));
      });
    await new Promise<void>((r) => h.server!.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => h.elsewhere!.listen(0, '127.0.0.1', r));
    h.port = (h.server.address() as AddressInfo).port;
    h.elsewherePort = (h.elsewhere.address() as AddressInfo).port;
    return h;
  }

  private every(ms: number, fn: () => boolean): void {
    const t = setInterval(() => {
      if (!fn()) {
        clearInterval(t);
        this.timers.delete(t);
      }
    }, ms);
    this.timers.add(t);
  }

  private answer(url: string, res: ServerResponse): void {
    switch (this.attack) {
      case 'silent':
        return;
      case 'huge': {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        // one item whose annotation never ends: the byte bound, not the item count, must cut it
        res.write(
          '{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"node-x","annotations":{"a":"',
        );
        const chunk = 'x'.repeat(256 * 1024);
        const more = () => {
          while (!res.destroyed && res.write(chunk));
        };
        res.on('drain', more);
        more();
        return;
      }
      case 'trickle':
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write('{');
        this.every(1000, () => !res.destroyed && res.write(' '));
        return;
      case 'redirect':
        res.writeHead(302, { Location: `http://127.0.0.1:${this.elsewherePort}${url}` });
        res.end();
        return;
      case 'self-redirect':
        if (!url.includes('r=1')) {
          res.writeHead(302, { Location: url + (url.includes('?') ? '&' : '?') + 'r=1' });
          res.end();
          return;
        }
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(EMPTY_LIST);
        return;
      case 'html-json':
        res.writeHead(200, { 'Content-Type': 'text/html' });
        res.end(JSON.stringify({ kind: 'NodeList', metadata: {}, items: [JSON.parse(NODE)] }));
        return;
      case 'html-page':
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
        res.end(
          '<!DOCTYPE html><html><head><title>Log in</title></head><body><form>password</form></body></html>',
        );
        return;
      case 'paged':
      case 'endless-pages': {
        if (url.includes('/clusterversions/') || url.includes('/upgradegates/')) {
          // not OpenShift, no gate: only the lists are paged
          res.writeHead(404, { 'Content-Type': 'application/json' });
          res.end(
            JSON.stringify({
              kind: 'Status',
              apiVersion: 'v1',
              status: 'Failure',
              reason: 'NotFound',
              code: 404,
            }),
          );
          return;
        }
        const q = new URL(url, 'http://x').searchParams;
        const from = Number(q.get('continue') ?? 0);
        const limit = this.attack === 'paged' ? Number(q.get('limit') ?? 1200) : 1;
        const total = this.attack === 'paged' ? 1200 : Infinity;
        const to = Math.min(total, from + limit);
        const items = Array.from({ length: to - from }, (_, k) => ({
          metadata: { name: `node-${from + k}` },
          status: { conditions: [{ type: 'Ready', status: 'True' }] },
        }));
        this.pages++;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            kind: 'List',
            metadata: to < total ? { continue: String(to) } : {},
            items,
          }),
        );
        return;
      }
      case 'many-items': {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write('{"kind":"NodeList","metadata":{},"items":[{}');
        const chunk = ',{}'.repeat(100_000);
        let left = 210;
        const more = () => {
          while (!res.destroyed && left > 0) {
            left--;
            if (!res.write(chunk)) return;
          }
          if (left === 0) res.end(']}');
        };
        res.on('drain', more);
        more();
        return;
      }
      case 'slow-pages': {
        this.pages++;
        const t = setTimeout(() => {
          this.timers.delete(t);
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(
            JSON.stringify({
              kind: 'List',
              metadata: { continue: String(this.pages) },
              items: [JSON.parse(NODE)],
            }),
          );
        }, 2000);
        this.timers.add(t);
        return;
      }
      case 'long-message':
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(
          (longMessage ??= JSON.stringify({
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            code: 500,
            message: 'the server is on fire\n'.repeat((50 * 1024 * 1024) / 22),
          })),
        );
        return;
      case 'gzip':
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' });
        res.end(gzipSync(EMPTY_LIST));
        return;
      case 'empty-json':
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end();
        return;
      case 'deep':
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          '{"kind":"NodeList","metadata":{},"items":[{"metadata":{"name":"n"},"spec":{"taints":' +
            '['.repeat(1_000_000) +
            ']'.repeat(1_000_000) +
            '}}]}',
        );
        return;
    }
  }

  async close(): Promise<void> {
    for (const t of this.timers) {
      clearInterval(t);
      clearTimeout(t);
    }
    for (const s of this.sockets) s.destroy();
    await Promise.all([this.server, this.elsewhere].map((s) => new Promise((r) => s?.close(r))));
  }
}
