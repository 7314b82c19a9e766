/** --pieces (and the -f file's `pieces`): whether bundle.json carries per-piece digests, on by default (docs/FORMAT.md "Pieces"). */
export const PIECE_MODES = ['on', 'none'] as const;
export type PieceMode = (typeof PIECE_MODES)[number];
