// A self-signed serving certificate for the metrics listener where the site gives none: P-256,
// the node's address as its IP SAN. Node 20 can sign but has no API to build a certificate, and
// one small DER encoder is less to trust than a new dependency; X509Certificate reads it back.
import {
  X509Certificate,
  generateKeyPairSync,
  randomBytes,
  sign,
  type KeyObject,
} from 'node:crypto';
import { isIP } from 'node:net';

/** A generated certificate's life; renewed (at start, and at each reload while running) once less than RENEW_BEFORE_MS of it is left. */
export const SELF_SIGNED_DAYS = 365;
export const RENEW_BEFORE_MS = 30 * 24 * 3600_000;
/** notBefore is set this far back, so a client whose clock is a little behind accepts a fresh certificate. */
const BACKDATE_MS = 3600_000;
/** The longest DER content the two-byte length form holds; the certificate stays far below it. */
const MAX_DER_CONTENT = 0xffff;

function tlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  if (n > MAX_DER_CONTENT)
    throw new Error(
      `DER content of ${n} bytes is over ${MAX_DER_CONTENT}: too many or too long certificate names`,
    );
  const len =
    n < 0x80
      ? Buffer.from([n])
      : n < 0x100
        ? Buffer.from([0x81, n])
        : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), len, content]);
}
const seq = (...parts: Buffer[]) => tlv(0x30, Buffer.concat(parts));

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]];
  const bytes = [40 * a + b];
  for (const v of rest) {
    const out = [v & 0x7f];
    for (let x = v >> 7; x > 0; x >>= 7) out.unshift((x & 0x7f) | 0x80);
    bytes.push(...out);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/** UTCTime until 2049, GeneralizedTime after (RFC 5280 4.1.2.5). */
function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z';
  return d.getUTCFullYear() < 2050
    ? tlv(0x17, Buffer.from(iso.slice(2)))
    : tlv(0x18, Buffer.from(iso));
}

/**
 * The address a certificate names for `ip`: an IPv4-mapped IPv6 address as its IPv4 address
 * (what a client dialling it checks); a zone ID or the unspecified address is refused, as no
 * client reaches a server by them.
 */
export function certificateIp(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  const plain = mapped ? mapped[1]! : ip;
  if (plain.includes('%'))
    throw new Error(
      `${ip} has a zone ID: give the address without %ZONE (a link-local address is no node address)`,
    );
  if (isIP(plain) === 0) throw new Error(`${ip} is not an IP address`);
  if (plain === '0.0.0.0' || /^[0:]+$/.test(plain))
    throw new Error(`${ip} is the unspecified address: give the node's own address`);
  return plain;
}

/** An IP address's bytes (4 or 16). */
function ipBytes(given: string): Buffer {
  // an IPv6 address ending in dotted IPv4 (64:ff9b::10.0.0.5): that tail as two groups
  const plain = certificateIp(given);
  if (isIP(plain) === 4) return Buffer.from(plain.split('.').map(Number));
  const ip = plain.replace(
    /(\d+)\.(\d+)\.(\d+)\.(\d+)$/,
    (_m, a, b, c, d) => `${((+a << 8) | +b).toString(16)}:${((+c << 8) | +d).toString(16)}`,
  );
  const [head, tail = ''] = ip.includes('::') ? ip.split('::') : [ip, undefined];
  const words = (s: string | undefined) => (s ? s.split(':') : []);
  const h = words(head);
  const t = words(tail);
  const all = ip.includes('::')
    ? [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t]
    : h;
  return Buffer.concat(all.map((w) => Buffer.from(w.padStart(4, '0'), 'hex')));
}

const ext = (id: string, critical: boolean, value: Buffer) =>
  seq(oid(id), ...(critical ? [tlv(0x01, Buffer.from([0xff]))] : []), tlv(0x04, value));

function subjectAltName(names: string[]): Buffer {
  return seq(
    ...names.map((n) => (isIP(n) ? tlv(0x87, ipBytes(n)) : tlv(0x82, Buffer.from(n, 'ascii')))),
  );
}

/** PEM of a DER certificate or key. */
function pem(label: string, der: Buffer): string {
  return `-----BEGIN ${label}-----\n${der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '')}\n-----END ${label}-----\n`;
}

/**
 * A certificate for `names` (IP addresses and DNS names), signed by its own key: serverAuth,
 * not a CA. Returns both as PEM.
 */
export function makeSelfSigned(
  names: string[],
  commonName: string,
  now = new Date(),
): { cert: string; key: string } {
  if (names.length === 0) throw new Error('a certificate needs at least one name');
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const serial = randomBytes(16);
  // positive and without a leading zero byte (DER INTEGER)
  serial[0] = (serial[0]! & 0x7f) | 0x01;
  const name = seq(tlv(0x31, seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(commonName, 'utf8')))));
  const ecdsaSha256 = seq(oid('1.2.840.10045.4.3.2'));
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))),
    tlv(0x02, serial),
    ecdsaSha256,
    name,
    seq(
      time(new Date(now.getTime() - BACKDATE_MS)),
      time(new Date(now.getTime() + SELF_SIGNED_DAYS * 24 * 3600_000)),
    ),
    name,
    (publicKey as KeyObject).export({ type: 'spki', format: 'der' }),
    tlv(
      0xa3,
      seq(
        ext('2.5.29.19', true, seq()),
        ext('2.5.29.15', true, tlv(0x03, Buffer.from([0x07, 0x80]))),
        ext('2.5.29.37', false, seq(oid('1.3.6.1.5.5.7.3.1'))),
        ext('2.5.29.17', false, subjectAltName(names)),
      ),
    ),
  );
  const signature = sign('sha256', tbs, privateKey);
  const cert = pem(
    'CERTIFICATE',
    seq(tbs, ecdsaSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature]))),
  );
  return { cert, key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

/** Whether `certPem` is still good for `names` a while longer. */
export function stillGood(certPem: string | Buffer, names: string[], now = Date.now()): boolean {
  try {
    const c = new X509Certificate(certPem);
    if (Date.parse(c.validTo) - now < RENEW_BEFORE_MS) return false;
    return names.every((n) =>
      isIP(n) ? c.checkIP(certificateIp(n)) !== undefined : c.checkHost(n) !== undefined,
    );
  } catch {
    return false;
  }
}
