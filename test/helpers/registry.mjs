// A throw-away local OCI registry (Debian's docker-registry, i.e. CNCF
// distribution 2.8) plus small skopeo wrappers, for integration tests and
// demos. Everything stays on 127.0.0.1.
//
// Facts checked against the installed versions (distribution 2.8.2, skopeo 1.9.3):
// - htpasswd auth works over plain http: distribution 2.8 only *recommends* TLS
//   for basic auth, it does not enforce it. /v2/ answers 401 with
//   `Www-Authenticate: Basic realm=...` without credentials and 200 with them.
// - token auth (`auth.token`) needs only realm/service/issuer/rootcertbundle; /v2/
//   answers 401 with `Www-Authenticate: Bearer realm=...` without a token.
// - htpasswd entries must be bcrypt. We use `htpasswd -Bbn` (apache2-utils) when
//   it is installed, otherwise perl's crypt(), which on Debian goes through
//   libxcrypt and supports `$2b$` bcrypt (perl-base is always installed).
// - skopeo 1.9 has `copy --preserve-digests` and `copy --all`.
// - skopeo's --src-tls-verify / --dest-tls-verify are only added for docker://
//   references (they are meaningless for oci:, dir:, ...).
// - skopeo is run with --insecure-policy so that it does not depend on
//   /etc/containers/policy.json being present/permissive.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startService } from './service.mjs';

export const REGISTRY_BIN = '/usr/bin/docker-registry';
export const SKOPEO_BIN = 'skopeo';

/**
 * @typedef {object} Registry
 * @property {string} host   "127.0.0.1:PORT" (use as the registry part of refs)
 * @property {string} url    "http://127.0.0.1:PORT"
 * @property {string} dir    temp dir holding config.yml and data/ (removed by stop())
 * @property {number} pid    pid of the docker-registry process
 * @property {string} [creds] "user:password" when started with opts.htpasswd
 * @property {() => string} logs  captured stdout+stderr of the registry so far
 * @property {() => Promise<void>} stop  idempotent: SIGTERM, SIGKILL after 3 s, then rm -rf dir
 */

/**
 * Sha256 digest of a buffer in OCI form.
 * @param {Buffer|Uint8Array|string} buf
 * @returns {string} 'sha256:<hex>'
 */
export function sha256(buf) {
  return 'sha256:' + createHash('sha256').update(buf).digest('hex');
}

/** @returns {Promise<number>} a currently free TCP port on 127.0.0.1 */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Run a command, collect stdout (Buffer) and stderr (string).
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ input?: string }} [opts]
 * @returns {Promise<{ code: number|null, signal: string|null, stdout: Buffer, stderr: string }>}
 */
function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    /** @type {Buffer[]} */
    const out = [];
    /** @type {Buffer[]} */
    const err = [];
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({
        code,
        signal,
        stdout: Buffer.concat(out),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
    if (child.stdin) {
      // a child that exits without reading its input must not crash the test with EPIPE
      child.stdin.on('error', () => {});
      child.stdin.end(opts.input);
    }
  });
}

const BCRYPT_ALPHABET = './ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** bcrypt's own base64 variant (no padding); 16 bytes -> 22 chars. */
function bcryptBase64(/** @type {Buffer} */ buf) {
  let s = '';
  let i = 0;
  while (i < buf.length) {
    let c1 = buf[i++];
    s += BCRYPT_ALPHABET[(c1 >> 2) & 0x3f];
    c1 = (c1 & 0x03) << 4;
    if (i >= buf.length) {
      s += BCRYPT_ALPHABET[c1 & 0x3f];
      break;
    }
    let c2 = buf[i++];
    c1 |= (c2 >> 4) & 0x0f;
    s += BCRYPT_ALPHABET[c1 & 0x3f];
    c1 = (c2 & 0x0f) << 2;
    if (i >= buf.length) {
      s += BCRYPT_ALPHABET[c1 & 0x3f];
      break;
    }
    c2 = buf[i++];
    c1 |= (c2 >> 6) & 0x03;
    s += BCRYPT_ALPHABET[c1 & 0x3f];
    s += BCRYPT_ALPHABET[c2 & 0x3f];
  }
  return s;
}

/**
 * An htpasswd line "user:$2b$..." (bcrypt, cost 5).
 * @param {string} user
 * @param {string} password
 * @returns {Promise<string>}
 */
async function htpasswdLine(user, password) {
  if (!user || user.includes(':'))
    throw new Error(`startRegistry: invalid htpasswd user ${JSON.stringify(user)}`);
  const bcryptRe = /^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$/;
  try {
    const r = await run('htpasswd', ['-Bbn', '-C', '5', user, password]);
    const line = r.stdout.toString('utf8').trim();
    if (r.code === 0 && bcryptRe.test(line.slice(user.length + 1))) return line;
  } catch {
    // htpasswd (apache2-utils) not installed: fall through to perl.
  }
  const salt = '$2b$05$' + bcryptBase64(randomBytes(16));
  let r;
  try {
    r = await run('perl', ['-e', 'print crypt($ARGV[0], $ARGV[1])', password, salt]);
  } catch (e) {
    throw new Error(
      `startRegistry: cannot create a bcrypt htpasswd entry: neither htpasswd (apache2-utils) nor perl is available (${e})`,
      { cause: e },
    );
  }
  const hash = r.stdout.toString('utf8').trim();
  if (r.code !== 0 || !bcryptRe.test(hash)) {
    throw new Error(
      `startRegistry: perl crypt() did not produce a bcrypt hash (got ${JSON.stringify(hash)}; ${r.stderr}); install apache2-utils`,
    );
  }
  return `${user}:${hash}`;
}

/**
 * @typedef {object} TokenAuth  distribution's `auth.token` settings (Bearer tokens from a token service)
 * @property {string} realm          the token service's URL, e.g. 'http://127.0.0.1:PORT/token'
 * @property {string} service        the `service` the registry asks tokens for (their `aud`)
 * @property {string} issuer         the `iss` the tokens must carry
 * @property {string} rootcertbundle path of the PEM certificate(s) the token signatures are checked against
 */

/**
 * @typedef {object} RegistryTls
 * @property {string} certificate  server certificate (PEM file)
 * @property {string} key          its private key (PEM file)
 * @property {string[]} [clientcas] CAs of the client certificates it requires
 */

/**
 * Start a private docker-registry on 127.0.0.1 with filesystem storage in a
 * fresh temp dir (deletes enabled, no auth unless opts.htpasswd or opts.token).
 * Never uses /etc/docker/registry/config.yml.
 *
 * With opts.tls the registry speaks only TLS (distribution's `http.tls`): certificate and key
 * are PEM file paths; clientcas (PEM file paths) makes it require a client certificate.
 *
 * With opts.netns it runs in that network namespace (ip netns exec), listening on opts.address
 * there (a node's address on a test bridge) instead of 127.0.0.1.
 *
 * @param {{ htpasswd?: { user: string, password: string }, token?: TokenAuth, tls?: RegistryTls, timeoutMs?: number, netns?: string, address?: string }} [opts]
 * @returns {Promise<Registry>}
 */
export async function startRegistry(opts = {}) {
  if (opts.htpasswd && opts.token)
    throw new Error('startRegistry: htpasswd and token auth are exclusive');
  const htpasswd =
    opts.htpasswd && (await htpasswdLine(opts.htpasswd.user, opts.htpasswd.password));
  // The free-port probe is racy (another process may grab it before the
  // registry binds), so retry a few times on "address already in use".
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const reg = await launch(
        await freePort(),
        htpasswd,
        opts.token,
        opts.timeoutMs ?? 15000,
        opts.tls,
        { netns: opts.netns, address: opts.address },
      );
      if (opts.htpasswd) reg.creds = `${opts.htpasswd.user}:${opts.htpasswd.password}`;
      return reg;
    } catch (e) {
      lastErr = e;
      if (!/address already in use/i.test(String(e))) break;
    }
  }
  throw lastErr;
}

/**
 * One docker-registry in a fresh temp dir (removed by stop(), and when it does not start).
 * @param {number} port
 * @param {string|undefined} htpasswd  an htpasswd line for `auth.htpasswd`
 * @param {TokenAuth|undefined} token  settings for `auth.token`
 * @param {number} timeoutMs
 * @param {RegistryTls} [tls]
 * @param {{ netns?: string, address?: string }} [where]
 * @returns {Promise<Registry>}
 */
async function launch(port, htpasswd, token, timeoutMs, tls, where = {}) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ob-registry-'));
  const cleanup = () => rm(dir, { recursive: true, force: true });
  const host = `${where.address ?? '127.0.0.1'}:${port}`;
  const url = `${tls ? 'https' : 'http'}://${host}`;
  const q = JSON.stringify;
  /** @type {string[]} */
  let auth = [];
  if (htpasswd) {
    auth = [
      'auth:',
      '  htpasswd:',
      '    realm: offline-bundle-test',
      `    path: ${q(path.join(dir, 'htpasswd'))}`,
    ];
  } else if (token) {
    auth = [
      'auth:',
      '  token:',
      `    realm: ${q(token.realm)}`,
      `    service: ${q(token.service)}`,
      `    issuer: ${q(token.issuer)}`,
      `    rootcertbundle: ${q(token.rootcertbundle)}`,
    ];
  }
  const config = path.join(dir, 'config.yml');
  try {
    if (htpasswd) await writeFile(path.join(dir, 'htpasswd'), htpasswd + '\n', { mode: 0o600 });
    await mkdir(path.join(dir, 'data'));
    await writeFile(
      config,
      [
        'version: 0.1',
        'log:',
        '  level: error',
        '  accesslog:',
        '    disabled: true',
        'storage:',
        '  filesystem:',
        `    rootdirectory: ${q(path.join(dir, 'data'))}`,
        '  delete:',
        '    enabled: true',
        'http:',
        `  addr: ${host}`,
        ...(tls
          ? [
              '  tls:',
              `    certificate: ${q(tls.certificate)}`,
              `    key: ${q(tls.key)}`,
              ...(tls.clientcas?.length
                ? ['    clientcas:', ...tls.clientcas.map((c) => `      - ${q(c)}`)]
                : []),
            ]
          : []),
        `  secret: ${randomBytes(16).toString('hex')}`,
        'health:',
        '  storagedriver:',
        '    enabled: false',
        ...auth,
        '',
      ].join('\n'),
    );
  } catch (e) {
    await cleanup();
    throw e;
  }

  // REGISTRY_* variables override the config file: do not inherit any.
  /** @type {NodeJS.ProcessEnv} */
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('REGISTRY_')) env[k] = v;

  const svc = await startService({
    name: 'docker-registry',
    // ip netns exec execs the registry: the pid stopped is the registry's
    command: where.netns ? 'ip' : REGISTRY_BIN,
    args: [...(where.netns ? ['netns', 'exec', where.netns, REGISTRY_BIN] : []), 'serve', config],
    env,
    // 401: htpasswd or token auth is on, and the registry is serving.
    // with TLS (and perhaps a required client certificate), a listening port is the signal
    ready: tls
      ? () => listening(port, where.address)
      : async () => {
          const res = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(1000) });
          await res.arrayBuffer();
          return res.status === 200 || res.status === 401;
        },
    readyWhat: tls ? `listen on ${host}` : `answer GET ${url}/v2/`,
    timeoutMs,
    pollMs: 50,
    killAfterMs: 3000,
    maxLogChars: 65536,
    cleanup,
  });
  return { host, url, dir, pid: svc.pid, logs: svc.logs, stop: svc.stop };
}

/** @param {number} port @param {string} [address] @returns {Promise<boolean>} whether address (127.0.0.1):port accepts a connection */
function listening(port, address = '127.0.0.1') {
  return new Promise((resolve) => {
    const sock = net.connect(port, address);
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

const TRANSPORT_RE =
  /^(docker:\/\/|oci:|oci-archive:|dir:|docker-archive:|docker-daemon:|containers-storage:)/;

/** @param {string} ref */
const isDocker = (ref) => ref.startsWith('docker://');

/**
 * `skopeo copy --quiet` with TLS verification disabled for docker:// sides.
 * Rejects with skopeo's stderr on failure.
 *
 * @param {string} src   e.g. 'oci:/tmp/layout:v1' or 'docker://127.0.0.1:5000/a:v1'
 * @param {string} dest
 * @param {string[]} [extraArgs] e.g. ['--all', '--preserve-digests', '--dest-creds', 'u:p']
 * @returns {Promise<void>}
 */
export async function skopeoCopy(src, dest, extraArgs = []) {
  const args = ['--insecure-policy', 'copy', '--quiet'];
  if (isDocker(src)) args.push('--src-tls-verify=false');
  if (isDocker(dest)) args.push('--dest-tls-verify=false');
  args.push(...extraArgs, src, dest);
  const r = await run(SKOPEO_BIN, args);
  if (r.code !== 0) {
    throw new Error(
      `skopeo ${args.join(' ')} failed (exit ${r.code ?? r.signal}): ${r.stderr.trim()}`,
    );
  }
}

/**
 * The raw manifest (or index) bytes as served for `ref`.
 *
 * @param {string} ref  'docker://host/repo:tag' or 'host/repo:tag' (docker:// is implied)
 * @param {string[]} [extraArgs] e.g. ['--creds', 'u:p']
 * @returns {Promise<Buffer>}
 */
export async function skopeoInspectRaw(ref, extraArgs = []) {
  const full = TRANSPORT_RE.test(ref) ? ref : `docker://${ref}`;
  const args = ['--insecure-policy', 'inspect', '--raw'];
  if (isDocker(full)) args.push('--tls-verify=false');
  args.push(...extraArgs, full);
  const r = await run(SKOPEO_BIN, args);
  if (r.code !== 0) {
    throw new Error(
      `skopeo ${args.join(' ')} failed (exit ${r.code ?? r.signal}): ${r.stderr.trim()}`,
    );
  }
  return r.stdout;
}
