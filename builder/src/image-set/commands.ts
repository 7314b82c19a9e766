import type { Command } from 'commander';
import { stringify as stringifyYaml } from 'yaml';
import { OciError } from '@offline-bundle/oci';
import { catalogSources } from './catalog-source.js';
import { BUNDLE_FILE_SCHEMA } from './schema.js';
import { diffManifests, formatDiff, readBundleManifest } from './diff.js';

/** `bundle diff A B`, `bundle catalog-sources FILE`, and the hidden `bundle schema` that packaging writes to share/bundle/bundle.schema.json. */
export function addImageSetCommands(program: Command): void {
  program.command('diff')
    .description('Show what changed from bundle A to bundle B: images added, removed or with another digest, blobs shared and new, with bytes (reads each bundle.json as "inspect" does; nothing is verified).')
    .argument('<a>', 'the older bundle')
    .argument('<b>', 'the newer bundle')
    .option('--json', 'print as JSON')
    .action(async (a: string, b: string, o: { json?: boolean }) => {
      const d = diffManifests(await readBundleManifest(a), await readBundleManifest(b), [a, b]);
      process.stdout.write(o.json ? JSON.stringify(d, null, 2) + '\n' : formatDiff(d));
    });

  program.command('catalog-sources')
    .description('Print the CatalogSource of each operator catalog a bundle carries (by digest, for "oc apply -f -" once the bundle is loaded on every node); reads bundle.json as "inspect" does.')
    .argument('<file>')
    .option('--namespace <ns>', 'the namespace of the CatalogSources', 'openshift-marketplace')
    .action(async (file: string, o: { namespace: string }) => {
      const objects = catalogSources((await readBundleManifest(file)).images, o.namespace);
      if (objects.length === 0) throw new OciError('NOT_FOUND', `${file} carries no operator catalog (bundle create -f with operators:)`);
      process.stdout.write(objects.map((x) => stringifyYaml(x)).join('---\n'));
    });

  program.command('schema', { hidden: true })
    .description('print the JSON Schema of "bundle create -f" files')
    .action(() => {
      process.stdout.write(JSON.stringify(BUNDLE_FILE_SCHEMA, null, 2) + '\n');
    });
}
