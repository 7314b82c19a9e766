import { BlockList, isIP } from 'node:net';

/** The proxy variables of an environment, as proxyFromEnv reads them. */
export interface ProxySettings {
  httpProxy: string;
  httpsProxy: string;
  noProxy: string;
}

const first = (env: NodeJS.ProcessEnv, ...names: string[]) =>
  names.map((n) => env[n]).find((v) => v) ?? '';
// Go (and so skopeo) takes "proxy:3128" as http://proxy:3128
const withScheme = (url: string) => (url && !url.includes('://') ? `http://${url}` : url);

/**
 * The proxy settings of the environment, read as Go's net/http does for skopeo: upper case
 * first, and loopback never proxied (a registry on 127.0.0.1 is this machine's). Undefined
 * when no proxy is set.
 */
export function proxyFromEnv(env: NodeJS.ProcessEnv): ProxySettings | undefined {
  const httpProxy = withScheme(first(env, 'HTTP_PROXY', 'http_proxy'));
  const httpsProxy = withScheme(first(env, 'HTTPS_PROXY', 'https_proxy'));
  if (!httpProxy && !httpsProxy) return undefined;
  const noProxy = [first(env, 'NO_PROXY', 'no_proxy'), 'localhost', '127.0.0.1', '[::1]']
    .filter(Boolean)
    .join(',');
  return { httpProxy, httpsProxy, noProxy };
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
const family = (ip: string) => (isIP(ip) === 6 ? 'ipv6' : 'ipv4');

/**
 * Whether `hostPort` is reached without the proxy, by NO_PROXY as Go's httpproxy reads it
 * (and so skopeo): "*", names with their subdomains ("corp.example", ".corp.example",
 * "*.corp.example"), "host:port", IP addresses and CIDR ranges ("10.0.0.0/8"); localhost and
 * loopback addresses never go through a proxy.
 */
export function bypassesProxy(hostPort: string, noProxy: string): boolean {
  const url = new URL(`https://${hostPort}`);
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = url.port || '443';
  const ip = isIP(host) !== 0;
  if (host === 'localhost' || (ip && LOOPBACK.check(host, family(host)))) return true;
  for (const raw of noProxy.split(/[,\s]+/)) {
    const entry = raw.toLowerCase();
    if (!entry) continue;
    if (entry === '*') return true;
    const slash = entry.indexOf('/');
    if (slash > 0) {
      const [net, bits] = [entry.slice(0, slash), Number(entry.slice(slash + 1))];
      if (ip && isIP(net) && family(net) === family(host)) {
        const range = new BlockList();
        range.addSubnet(net, bits, family(net));
        if (range.check(host, family(host))) return true;
      }
      continue;
    }
    if (isIP(entry)) {
      if (entry === host) return true;
      continue;
    }
    const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(entry);
    if (!m || (m[2] && m[2] !== port)) continue;
    const name = m[1]!.replace(/^\[|\]$/g, '').replace(/^\*/, '');
    if (host === name.replace(/^\./, '') && !name.startsWith('.')) return true;
    if (!ip && host.endsWith(name.startsWith('.') ? name : `.${name}`)) return true;
  }
  return false;
}
