// What the peer transfer did, for the agent's metrics and `bundle cluster status`: bytes
// served and fetched (per peer), and which peers were caught serving bytes that did not match.
import type { PeerTransferStatus } from '@offline-bundle/status';

export class PeerCounters {
  /** Bytes of layout entries this node's peer server sent. */
  bytesServed = 0;
  /** Requests read (from clients that passed the TLS handshake). */
  requests = 0;
  /** Blob requests answered 503 (downloader slots full, or paused). */
  busyRefusals = 0;
  /** Requests refused as malformed (bad path, method, range). */
  badRequests = 0;
  /** Verified bytes fetched, by peer node name (bytes of a blob that failed its digest not counted). */
  readonly fetchedFrom = new Map<string, number>();
  /** Peers that served bytes not matching the signed digest. */
  readonly suspect = new Set<string>();

  fetched(node: string, bytes: number): void {
    this.fetchedFrom.set(node, (this.fetchedFrom.get(node) ?? 0) + bytes);
  }

  get bytesFetched(): number {
    let sum = 0;
    for (const n of this.fetchedFrom.values()) sum += n;
    return sum;
  }

  /** The status's compact form (status.peers.transfer), the largest senders first. */
  snapshot(): PeerTransferStatus {
    const fetchedFrom = [...this.fetchedFrom]
      .map(([node, bytes]) => ({ node, bytes }))
      .sort((a, b) => b.bytes - a.bytes);
    return {
      bytesServed: this.bytesServed,
      bytesFetched: this.bytesFetched,
      fetchedFrom,
      suspect: [...this.suspect].sort(),
    };
  }
}
