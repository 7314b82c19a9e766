// The peer transfer's API for the daemon and the tests: serve what this node holds verified,
// fetch an approved bundle from the others.
export { startPeerServer, PEER_LIMITS } from './peer-server.js';
export type { PeerServerOptions, RunningPeerServer } from './peer-server.js';
export { ServedBundle } from './served-bundle.js';
export type { PeerOffer } from './served-bundle.js';
export { fetchFromPeers, PeerSource } from './peer-fetch.js';
export type { PeerFetchOptions } from './peer-fetch.js';
export { loadPeerCredentials, readPeerKeys, MAX_PEER_PEM_BYTES } from './peer-tls.js';
export type { PeerCredentials } from './peer-tls.js';
export { PeerCounters } from './peer-counters.js';
export { TokenBucket } from './token-bucket.js';
export type { BucketClock } from './token-bucket.js';
export { PeerClient, PeerFault } from './peer-client.js';
export type { PeerApproval, PeerEndpoint, PeerDirectory } from './types.js';
export { peerSlots } from '../config.js';
export { peerFetchBase, peerServerOptions } from './peer-config.js';
export { PeerService } from './peer-service.js';
export {
  rotated,
  rarestFirst,
  weightedPick,
  COMPLETE_WEIGHT,
  BUSY_WEIGHT,
  BUSY_MEMORY_MS,
} from './peer-choice.js';
export type { Holder } from './peer-choice.js';
export { MAX_PIECE_MISSES } from './peer-bounds.js';
export {
  MAX_HAVE_PARTIAL_BLOBS,
  parsePieceListing,
  prefixBitmap,
  runEnd,
  pieceSet,
  piecesSet,
} from './piece-listing.js';
export { PieceCheck } from './piece-check.js';
