// A forward proxy that speaks only CONNECT (as corporate HTTPS proxies do for TLS), on
// 127.0.0.1: it records every request line and tunnels the targets it is given an upstream
// for (so a test can use a name that only the proxy resolves); anything else gets 403.
import net from 'node:net';

/**
 * @param {{ teardown: (fn: () => unknown) => void }} t node-tap test (the proxy closes with it)
 * @param {Record<string, string>} upstreams CONNECT target "host:port" -> "127.0.0.1:port"
 * @returns {Promise<{ url: string, seen: string[] }>} seen: "CONNECT host:port" per request
 */
export async function startConnectProxy(t, upstreams) {
  /** @type {string[]} */
  const seen = [];
  /** @type {Set<net.Socket>} */
  const sockets = new Set();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    let head = Buffer.alloc(0);
    const onData = (/** @type {Buffer} */ d) => {
      head = Buffer.concat([head, d]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      client.off('data', onData);
      const [method, target] = head.subarray(0, end).toString('latin1').split(' ');
      seen.push(`${method} ${target}`);
      const upstream = method === 'CONNECT' && target ? upstreams[target] : undefined;
      if (!upstream) {
        client.end('HTTP/1.1 403 Forbidden\r\n\r\n');
        return;
      }
      const [host, port] = upstream.split(':');
      const up = net.connect(Number(port), host, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        const rest = head.subarray(end + 4);
        if (rest.length) up.write(rest);
        client.pipe(up).pipe(client);
      });
      sockets.add(up);
      up.on('close', () => sockets.delete(up));
      up.on('error', () => client.destroy());
      client.on('error', () => up.destroy());
    };
    client.on('data', onData);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  t.teardown(
    () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve(undefined));
      }),
  );
  const addr = /** @type {net.AddressInfo} */ (server.address());
  return { url: `http://127.0.0.1:${addr.port}`, seen };
}
