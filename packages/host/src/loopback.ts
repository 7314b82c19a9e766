import { isIP } from 'node:net';

/** True for 127.0.0.0/8, ::1 (and its IPv4-mapped forms) and "localhost". */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h) || h === '0:0:0:0:0:0:0:1';
  return false;
}
