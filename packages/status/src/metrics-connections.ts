// How many connections the metrics listener holds before they have proved anything. Anyone on
// the node network can open one; the gate that keeps these limits (@offline-bundle/host
// connection-gate.ts) is the peer port's too, with its own.
import type { GateLimits } from '@offline-bundle/host';

export { addressKey } from '@offline-bundle/host';

export const METRICS_CONNECTION_LIMITS = {
  /** Connections past their first-bytes wait, all addresses together. */
  max: 32,
  /** Of those, from one address (an IPv6 /64 counts as one). Prometheus holds one per target. */
  perAddress: 8,
  /** How long a new connection has to send its first bytes (a client sends its ClientHello at once) before it is judged. */
  firstBytesWaitMs: 25,
} as const satisfies GateLimits;
