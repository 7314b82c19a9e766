import { homedir } from 'node:os';
import { rootCertificates } from 'node:tls';
import { Agent, EnvHttpProxyAgent, interceptors, type Dispatcher } from 'undici';
import { certDirFor, readCertDir, type CertDirOptions, type HostTls } from './cert-dirs.js';
import { OciError } from '@offline-bundle/oci';
import { bypassesProxy, proxyFromEnv, systemRoot, type ProxySettings } from '@offline-bundle/host';

export interface ConnectionOptions extends CertDirOptions {
  /** Where HTTPS_PROXY, HTTP_PROXY and NO_PROXY (either case) are read. */
  env?: NodeJS.ProcessEnv;
}

/** The connection settings of a process: its environment's proxies, certs.d under its system root and $HOME, --cert-dir. */
export function connectionOptions(
  env: NodeJS.ProcessEnv = process.env,
  certDir?: string,
): ConnectionOptions {
  return {
    env,
    systemRoot: systemRoot(env),
    home: env.HOME ?? homedir(),
    ...(certDir ? { certDir } : {}),
  };
}

const CERT_CODES = /CERT|SELF_SIGNED|UNABLE_TO_(VERIFY|GET_ISSUER)|ERR_TLS_CERT_ALTNAME_INVALID/;
const PLAIN_HTTP_CODES = new Set([
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ERR_SSL_PACKET_LENGTH_TOO_LONG',
  'ERR_SSL_HTTP_REQUEST',
]);

/** Whether a failed TLS connection means the peer speaks plain http. */
export function isPlainHttpAnswer(err: unknown): boolean {
  const e = err as NodeJS.ErrnoException;
  return (
    PLAIN_HTTP_CODES.has(e?.code ?? '') ||
    /wrong version number|packet length too long/.test(e?.message ?? '')
  );
}

/**
 * A connection failure as one line that says what to do. TLS failures (plain http on the
 * port, an unknown CA) get their own code: no retry can fix them.
 */
export function connectionError(err: unknown, host: string, tls: HostTls | undefined): OciError {
  const e = err as NodeJS.ErrnoException;
  const code = e?.code ?? '';
  if (isPlainHttpAnswer(err)) {
    return new OciError(
      'TLS_ERROR',
      `${host} answered plain HTTP to a TLS request: pass --tls-verify=false to allow plain http for it`,
      { cause: err },
    );
  }
  if (CERT_CODES.test(code)) {
    const where = tls
      ? `the CAs in ${tls.dir} do not sign it`
      : `put its CA in /etc/containers/certs.d/${host}/ca.crt or pass --cert-dir DIR`;
    return new OciError(
      'TLS_ERROR',
      `${host}: TLS certificate not trusted (${code}): ${where} (or --tls-verify=false to skip the check)`,
      { cause: err },
    );
  }
  if (/^Proxy response \((\d+)\)/.test(e?.message ?? '')) {
    return new OciError(
      'NETWORK_ERROR',
      `the proxy refused to connect to ${host}: ${e.message} (check HTTPS_PROXY / NO_PROXY)`,
      { cause: err },
    );
  }
  return new OciError('NETWORK_ERROR', `cannot reach ${host}: ${e?.message ?? String(err)}`, {
    cause: err,
  });
}

interface HostConnection {
  dispatcher: Dispatcher;
  tls?: HostTls;
}

/**
 * One HTTP dispatcher per registry host and TLS mode, as containers/image builds one
 * transport per registry: the host's certs.d directory (CAs, client certificate), the
 * environment's proxy, redirects followed.
 */
export class Connections {
  private readonly hosts = new Map<string, Promise<HostConnection>>();
  private readonly proxy: ProxySettings | undefined;

  constructor(private readonly opts: ConnectionOptions = {}) {
    this.proxy = proxyFromEnv(opts.env ?? process.env);
  }

  /** The dispatcher for `hostPort`; `insecure` skips certificate checks (--tls-verify=false). */
  get(hostPort: string, insecure: boolean): Promise<HostConnection> {
    const key = `${insecure ? 'insecure' : 'secure'} ${hostPort}`;
    let conn = this.hosts.get(key);
    if (!conn) {
      conn = this.open(hostPort, insecure);
      conn.catch(() => this.hosts.delete(key));
      this.hosts.set(key, conn);
    }
    return conn;
  }

  private async open(hostPort: string, insecure: boolean): Promise<HostConnection> {
    const dir = await certDirFor(hostPort, this.opts);
    const tls = dir ? await readCertDir(dir) : undefined;
    const tlsOptions = {
      ...(tls?.ca.length ? { ca: [...rootCertificates, ...tls.ca] } : {}),
      ...(tls?.cert ? { cert: tls.cert, key: tls.key } : {}),
      ...(insecure ? { rejectUnauthorized: false } : {}),
    };
    const connect = { timeout: 30_000, ...tlsOptions };
    // requestTls: the TLS to the registry inside a proxy's CONNECT tunnel. NO_PROXY is judged
    // here for the host itself (undici's own check knows no CIDR ranges); undici's applies to redirects.
    const proxied = this.proxy && !bypassesProxy(hostPort, this.proxy.noProxy);
    const base = proxied
      ? new EnvHttpProxyAgent({ ...this.proxy!, connect, requestTls: tlsOptions })
      : new Agent({ connect });
    return {
      dispatcher: base.compose(interceptors.redirect({ maxRedirections: 5 })),
      ...(tls ? { tls } : {}),
    };
  }

  async close(): Promise<void> {
    const all = await Promise.allSettled(this.hosts.values());
    this.hosts.clear();
    await Promise.all(
      all.map((c) => (c.status === 'fulfilled' ? c.value.dispatcher.close() : undefined)),
    );
  }
}
