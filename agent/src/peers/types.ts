// The seam between finding peers (through the Kubernetes API: approvals and the other nodes'
// NodeBundleStatus) and moving bytes between them (mutual-TLS HTTPS on a host port). Neither
// side needs the other's machinery: a test gives the transfer a fixed directory, and the
// directory is tested against the API stand-in without a byte moving.

/** An admin's approval of one bundle for fetching from peers (a BundleApproval resource). */
export interface PeerApproval {
  /** sha256:… of the bundle's signed bundle.json: what a fetching node verifies first. */
  manifestDigest: string;
  /** The release version the approval names (shown to people; the signed bundle.json decides). */
  version: string;
  /** Fingerprint of the key the admin approved it for; the node still requires one of its pinned keys. */
  signer: string;
}

/** A node that says it can serve (part of) a bundle. */
export interface PeerEndpoint {
  /** The Node's name (for status lines, metrics and suspect marking). */
  node: string;
  /** https://INTERNAL-IP:PORT, from the Node's InternalIP and the peer port it publishes. */
  url: string;
  /** It holds every blob of the bundle, verified. */
  complete: boolean;
  /** How many of the bundle's blobs it holds verified (equal to the listing's count when complete). */
  verifiedBlobs: number;
}

/** What a node that wants a bundle from peers asks of the cluster. */
export interface PeerDirectory {
  /** Approvals this node can see now. */
  approved(): Promise<PeerApproval[]>;
  /** Other nodes (never this one) publishing `manifestDigest`, complete ones first. */
  peersFor(manifestDigest: string): Promise<PeerEndpoint[]>;
  /**
   * Tells `listener` each time the approvals changed as a watch of them saw it (the daemon's);
   * returns the unsubscribe. Absent: a directory only asked, whose answers a fetch looks up on a timer.
   */
  onApprovalsChanged?(listener: () => void): () => void;
}
