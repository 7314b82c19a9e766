// `-o` must name a regular file: a device node, FIFO or socket that exists is refused (with or
// without --force) before any registry is asked, and never replaced by a file; `-o ''` says so.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { createServer as httpServer } from 'node:http';
import { createServer as netServer } from 'node:net';
import { stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, errorCode, keygen } from './lib.js';

const work = await tmpdir(t, 'ob-output-');
const keys = await keygen(work);
// a registry that counts the requests it gets: none may come
let requests = 0;
const registry = httpServer((_req, res) => {
  requests++;
  res.writeHead(404).end();
});
await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
t.teardown(() => registry.close());
const image = `docker://127.0.0.1:${(registry.address() as AddressInfo).port}/acme/app:v1`;
const create = (out: string, ...more: string[]) =>
  bundle([
    'create',
    '--version',
    '1.0',
    '--image',
    image,
    '--tls-verify=false',
    '--key',
    keys.key,
    '--cache',
    path.join(work, 'cache'),
    '-o',
    out,
    ...more,
  ]);

t.test(
  'a device node, FIFO or socket is refused, --force or not, and left as it was',
  async (t) => {
    const blk = path.join(work, 'sdb');
    const chr = path.join(work, 'null');
    const fifo = path.join(work, 'fifo');
    execFileSync('mknod', [blk, 'b', '7', '200']);
    execFileSync('mknod', [chr, 'c', '1', '3']);
    execFileSync('mkfifo', [fifo]);
    const sock = path.join(work, 'sock');
    const server = netServer();
    await new Promise<void>((r) => server.listen(sock, r));
    t.teardown(() => server.close());
    const cases: [string, string, (s: Awaited<ReturnType<typeof stat>>) => boolean][] = [
      [blk, 'a block device', (s) => s.isBlockDevice()],
      [chr, 'a character device', (s) => s.isCharacterDevice()],
      [fifo, 'a FIFO \\(named pipe\\)', (s) => s.isFIFO()],
      [sock, 'a socket', (s) => s.isSocket()],
    ];
    for (const [file, kind, still] of cases) {
      for (const force of [[], ['--force']]) {
        const r = await create(file, ...force);
        t.equal(r.code, 1, `${file} ${force.join('')}: exit 1`);
        t.equal(errorCode(r.stderr), 'INVALID_CONFIG');
        t.match(
          r.stderr,
          new RegExp(
            `^bundle: INVALID_CONFIG: -o ${file} is ${kind}, not a file: write the bundle to a file on the stick's filesystem\\n$`,
          ),
        );
        t.ok(still(await stat(file)), `${file} is still what it was`);
      }
    }
    t.equal(requests, 0, 'refused before any registry request');
  },
);

t.test("-o '' says that -o is empty", async (t) => {
  const r = await create('');
  t.equal(r.code, 1);
  t.match(r.stderr, /^bundle: INVALID_CONFIG: -o is empty/);
  t.equal(requests, 0);
});
