// A parallel blob client, the way a fast puller fetches: N keep-alive connections, each GET
// /v2/<repo>/blobs/<digest> read to the end and its length checked (not hashed: this
// measures the server, not the client's SHA-256).
import http from 'node:http';

/**
 * @param {string} base 'http://127.0.0.1:PORT'
 * @param {{ repo: string, digest: string, size: number }[]} blobs
 * @param {number} streams
 * @returns {Promise<number>} bytes received
 */
export async function fetchBlobs(base, blobs, streams) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: streams });
  let next = 0;
  let bytes = 0;
  const one = (b) =>
    new Promise((resolve, reject) => {
      http
        .get(`${base}/v2/${b.repo}/blobs/${b.digest}`, { agent }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            return reject(new Error(`GET ${b.repo}/blobs/${b.digest}: HTTP ${res.statusCode}`));
          }
          let n = 0;
          res.on('data', (c) => {
            n += c.length;
          });
          res.on('end', () =>
            n === b.size
              ? resolve(n)
              : reject(new Error(`GET ${b.digest}: ${n} bytes, expected ${b.size}`)),
          );
          res.on('error', reject);
        })
        .on('error', reject);
    });
  const worker = async () => {
    while (next < blobs.length) bytes += await one(blobs[next++]);
  };
  try {
    await Promise.all(Array.from({ length: streams }, worker));
  } finally {
    agent.destroy();
  }
  return bytes;
}
