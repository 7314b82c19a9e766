import type { Command } from 'commander';
import { escapeControls } from '@offline-bundle/host';
import { plural } from '@offline-bundle/cli';
import { extractBundle, loadTrust, withBundle } from '@offline-bundle/format';
import { Progress } from '../progress.js';
import { assertBundlePath } from './split.js';
import { fileProgress, trustOptions, warnUnsafeKey } from './trust-options.js';

/** `bundle extract FILE DIR`: verified and unpacked as an OCI image layout, or nothing of it in DIR. */
export function addExtractCommand(program: Command): void {
  trustOptions(
    program
      .command('extract')
      .description(
        'Verify and unpack a bundle into DIR as an OCI image layout (plus bundle.json). On failure DIR holds nothing of it.',
      )
      .argument('<file>')
      .argument('<dir>'),
  )
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .action(
      async (
        file: string,
        dir: string,
        o: { key?: string[]; digest?: string; json?: boolean; quiet?: boolean },
      ) => {
        await assertBundlePath(file);
        const progress = new Progress({ quiet: o.quiet });
        const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warnUnsafeKey });
        const v = await withBundle(file, (source) =>
          extractBundle(source, dir, {
            trust,
            onProgress: fileProgress(progress, `extracting ${file}`),
          }),
        ).finally(() => progress.finish());
        if (o.json)
          process.stdout.write(
            JSON.stringify({
              extracted: dir,
              digest: v.fileDigest,
              images: v.manifest.images.length,
              blobs: v.manifest.blobs.length,
            }) + '\n',
          );
        else
          process.stdout.write(
            escapeControls(
              `extracted ${plural(v.manifest.images.length, 'image')} to ${dir} (OCI layout; e.g. skopeo inspect oci:${dir}:${v.manifest.images[0] ? (v.manifest.images[0].tag ? `${v.manifest.images[0].repository}:${v.manifest.images[0].tag}` : `${v.manifest.images[0].repository}@${v.manifest.images[0].digest}`) : 'REF'})`,
            ) + '\n',
          );
      },
    );
}
