import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { formatBytes, plural } from '@offline-bundle/cli';
import {
  assertTrust,
  baseEntries,
  baseLabel,
  deltaFacts,
  loadTrust,
  verifyBundle,
  withBundle,
  type BundleManifest,
} from '@offline-bundle/format';
import { Progress } from '../progress.js';
import { assertBundlePath } from './split.js';
import { fileProgress, trustOptions, warnUnsafeKey } from './trust-options.js';

/** What a verified delta still needs from its base: said after "valid", each blob by digest with --json. */
function baseNeeds(m: BundleManifest): string {
  const d = deltaFacts(m);
  if (!d) return '';
  return `; a delta: every carried blob checked; it needs ${plural(d.totalBlobs - d.carriedBlobs, 'blob')} (${formatBytes(d.baseBytes)}) of ${baseLabel(d.base)} (${d.base.bundleJson}) on the node (--json lists them)`;
}

/** `bundle verify FILE`: the whole bundle checked; exit 0 only when valid. */
export function addVerifyCommand(program: Command): void {
  trustOptions(
    program
      .command('verify')
      .description(
        "Check a bundle completely: signature, every entry's digest and size, structure. Exit 0 only when valid.",
      )
      .argument('<file>'),
  )
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .action(
      async (
        file: string,
        o: { key?: string[]; digest?: string; json?: boolean; quiet?: boolean },
      ) => {
        await assertBundlePath(file);
        const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warnUnsafeKey });
        const progress = new Progress({ quiet: o.quiet });
        assertTrust(trust);
        const v = await withBundle(file, (source) =>
          verifyBundle(source, { trust, onProgress: fileProgress(progress, `verifying ${file}`) }),
        ).finally(() => progress.finish());
        const needs = v.manifest.base
          ? {
              needsFromBase: {
                ...v.manifest.base,
                blobs: baseEntries(v.manifest).map((e) => ({ digest: e.digest, size: e.size })),
              },
            }
          : {};
        if (o.json)
          process.stdout.write(
            JSON.stringify({
              valid: true,
              digest: v.fileDigest,
              size: v.fileSize,
              signer: v.signer?.fingerprint ?? null,
              release: v.manifest.release,
              ...needs,
            }) + '\n',
          );
        else
          process.stdout.write(
            escapeControls(
              `valid: ${v.manifest.release.name} ${v.manifest.release.arch}, ${plural(v.manifest.images.length, 'image')}, ${v.fileDigest}${v.signer ? `, signed by ${v.signer.source}` : ''}${baseNeeds(v.manifest)}`,
            ) + '\n',
          );
      },
    );
}
