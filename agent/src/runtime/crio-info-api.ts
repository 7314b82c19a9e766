// CRI-O answers plain HTTP/1 on its CRI socket beside gRPC (cmux in cmd/crio/main.go): GET
// /config is its running configuration as TOML, what `crio status config` prints. Its answer is
// untrusted input: bounded in size and time.
import { request } from 'node:http';

/** A stock running config is ~10 KiB; a CRI-O with many runtimes and workloads stays far below. */
export const CRIO_CONFIG_MAX_BYTES = 1024 * 1024;
/** A whole request, connect to last byte: CRI-O answers from memory. */
const CRIO_INFO_TIMEOUT_MS = 5_000;

/** GET `path` on CRI-O's socket; the body of a 200 answer, else an error naming what came back. */
export function crioInfoGet(
  socket: string,
  path: string,
  timeoutMs = CRIO_INFO_TIMEOUT_MS,
  maxBytes = CRIO_CONFIG_MAX_BYTES,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: socket, path, method: 'GET', headers: { host: 'crio' } },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > maxBytes)
            req.destroy(new Error(`GET ${path} answered more than ${maxBytes} bytes`));
          else chunks.push(c);
        });
        res.on('end', () => {
          clearTimeout(timer);
          const body = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode === 200) resolve(body);
          else
            reject(
              new Error(
                `GET ${path} answered HTTP ${res.statusCode}: ${body.split('\n', 1)[0]!.slice(0, 200)}`,
              ),
            );
        });
        res.on('error', reject);
      },
    );
    // a bound on the whole request, not on idleness: a socket trickling a byte at a time is cut too
    const timer = setTimeout(
      () => req.destroy(new Error(`GET ${path} was not answered in full within ${timeoutMs} ms`)),
      timeoutMs,
    );
    req.on('close', () => clearTimeout(timer));
    req.on('error', reject);
    req.end();
  });
}

/** CRI-O's running configuration (TOML), as `crio status config` shows it. */
export function crioRunningConfig(socket: string, timeoutMs?: number): Promise<string> {
  return crioInfoGet(socket, '/config', timeoutMs);
}
