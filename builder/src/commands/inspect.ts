import type { Command } from 'commander';
import { formatPlatform } from '@offline-bundle/oci';
import { escapeControls } from '@offline-bundle/host';
import { formatBytes, plural } from '@offline-bundle/cli';
import {
  FORMAT_VERSIONS,
  baseLabel,
  deltaFacts,
  readHeader,
  withBundle,
  type BundleManifest,
} from '@offline-bundle/format';
import { pathLines, pathOf, upgradesFromLine } from '../release-path.js';
import { assertBundlePath } from './split.js';

/** A bundle's format version and the oldest bundle-agent that reads it (bundle.json was read, so the version is a known one). */
function formatOf(m: BundleManifest): {
  version: number;
  mediaType: string;
  minAgentVersion: string;
} {
  return {
    version: m.schemaVersion,
    mediaType: m.mediaType,
    minAgentVersion: FORMAT_VERSIONS[m.schemaVersion]!.minReader,
  };
}

function summary(m: BundleManifest) {
  return {
    format: formatOf(m),
    release: m.release,
    ...(m.release.via ? { path: pathOf(m.release) } : {}),
    images: m.images.map((i) => ({
      reference: i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`,
      digest: i.digest,
      platforms: i.platforms.map(formatPlatform),
      ...(i.component ? { component: i.component } : {}),
    })),
    // served by the node's registry, never pulled: apart from images, which are
    charts: (m.charts ?? []).map((c) => ({
      reference: c.tag ? `${c.repository}:${c.tag}` : `${c.repository}@${c.digest}`,
      digest: c.digest,
    })),
    blobs: m.blobs.length,
    releaseSignatures: (m.release.signatures ?? []).map((s, i) => ({
      configMapKey: m.release.digest
        ? `${m.release.digest.replace(':', '-')}-${i + 1}`
        : `signature-${i + 1}`,
      digest: s.digest,
      keyIds: s.keyIds,
    })),
    totals: m.totals,
    ...(m.base ? { delta: deltaFacts(m) } : {}),
    pieces: piecesFacts(m),
    creator: m.creator,
    signer: m.signer,
  };
}

/** "delta:     against 4.14.38 4.14.38 (sha256:…), 12 of 340 blobs carried, 1.2 GB (17.1 GB from the base)". */
function deltaLine(m: BundleManifest): string[] {
  const d = deltaFacts(m);
  if (!d) return [];
  return [
    `delta:     against ${baseLabel(d.base)} (${d.base.bundleJson}), ${d.carriedBlobs} of ${d.totalBlobs} blobs carried, ${formatBytes(d.carriedBytes)} (${formatBytes(d.baseBytes)} from the base: a node needs ${d.base.version} kept on its disk)`,
  ];
}

/** Whether bundle.json carries per-piece digests (a peer can check a blob piece by piece), their size and how many blobs are listed. */
function piecesFacts(m: BundleManifest): { pieceBytes: number; blobs: number } | null {
  return m.pieces ? { pieceBytes: m.pieces.size, blobs: Object.keys(m.pieces.blobs).length } : null;
}

function piecesLine(m: BundleManifest): string {
  const p = piecesFacts(m);
  // pieces are whole MiB (a power of two from 1 MiB): said as the flag's help says them
  return `pieces:    ${p ? `${p.pieceBytes / (1 << 20)} MiB each, digests of ${plural(p.blobs, 'blob')} (every one longer than a piece)` : 'none (peers check each blob only whole)'}`;
}

function printSummary(m: BundleManifest, fileBytes: number): void {
  const r = m.release;
  const lines = [
    `release:   ${r.name} (version ${r.version}, ${r.arch})`,
    ...(r.image ? [`image:     ${r.image}`, `digest:    ${r.digest}`] : []),
    upgradesFromLine(r),
    ...(r.via ? pathLines(pathOf(r)!) : []),
    ...(r.image
      ? [
          `release signatures: ${r.signatures?.length ? r.signatures.map((s, i) => `signature-${i + 1} by key ${s.keyIds.join(',')} (${s.digest})`).join('; ') : 'none (the cluster will refuse the update without --force: rebuild with --release-signature or --signature-store)'}`,
        ]
      : []),
    `format:    version ${m.schemaVersion}: needs bundle-agent ≥ ${formatOf(m).minAgentVersion}`,
    `signer:    ${m.signer.fingerprint} (${m.signer.algorithm})`,
    `created:   ${m.creator.createdAt} by ${m.creator.tool} ${m.creator.version}`,
    `sizes:     layout ${formatBytes(m.totals.layoutBytes)}, file ${formatBytes(fileBytes)}, image store ~${formatBytes(m.totals.imageStoreBytes)}`,
    ...deltaLine(m),
    piecesLine(m),
    ...(m.agent
      ? [
          `agent:     bundle-agent ${m.agent.version} (${m.agent.repository}@${m.agent.digest}); nodes switch to it once Ready`,
        ]
      : []),
    `images (${m.images.length}), blobs: ${m.blobs.length}`,
    ...m.images.map(
      (i) =>
        `  ${i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`}  ${i.platforms.map(formatPlatform).join(',')}${i.component ? `  [${i.component}]` : ''}`,
    ),
    ...(m.charts?.length
      ? [
          `charts (${m.charts.length}; served by the node's registry, not pulled):`,
          ...m.charts.map(
            (c) =>
              `  ${c.tag ? `${c.repository}:${c.tag}` : `${c.repository}@${c.digest}`}  ${c.digest}`,
          ),
        ]
      : []),
  ];
  // inspect shows bundle.json before anything is verified: its strings must not drive the terminal
  process.stdout.write(lines.map(escapeControls).join('\n') + '\n');
}

/** `bundle inspect FILE`: what bundle.json says, read from the first frames, nothing verified. */
export function addInspectCommand(program: Command): void {
  program
    .command('inspect')
    .description(
      'Show what a bundle holds (reads only its first frames; nothing is verified: use "bundle verify").',
    )
    .argument('<file>')
    .option('--json', 'print as JSON')
    .action(async (file: string, o: { json?: boolean }) => {
      await assertBundlePath(file);
      const [{ manifest }, size] = await withBundle(
        file,
        async (source) => [await readHeader(source), source.size] as const,
      );
      if (o.json) process.stdout.write(JSON.stringify(summary(manifest), null, 2) + '\n');
      else printSummary(manifest, size);
    });
}
