import type { Command } from 'commander';
import { stringify as stringifyYaml } from 'yaml';
import { OciError } from '@offline-bundle/oci';
import { catalogSources } from './catalog-source.js';
import { BUNDLE_FILE_SCHEMA } from './schema.js';
import { diffContents, formatDiff, readBundleManifest, type Contents } from './diff.js';
import { applyBundleFile, type CreateFlags } from './create-options.js';
import { createBundle, type CreateOptions, type PlannedContents } from '../create.js';
import { Progress } from '../progress.js';
import {
  addOptions,
  askCredsPassword,
  contentOptions,
  registryOptions,
  updateGraphOption,
} from '../create-flags.js';

/** What `-f FILE` resolves to, as `create --dry-run` resolves it: manifests only, no layer but a release's or a catalog's. */
async function resolveFile(o: CreateFlags & { quiet?: boolean }, cmd: Command): Promise<Contents> {
  const progress = new Progress({ quiet: o.quiet });
  const { imageWhere, chartWhere } = await applyBundleFile(o, cmd, (m) => progress.log(m));
  let contents: PlannedContents | undefined;
  await createBundle({
    ...o,
    images: o.image,
    imageWhere,
    charts: o.chart,
    chartWhere,
    releaseSignatures: o.releaseSignature as string[] | undefined,
    progress,
    key: '',
    output: '',
    dryRun: true,
    onContents: (c) => {
      contents = c;
    },
  } as CreateOptions & { dryRun: true });
  return contents!;
}

/** `bundle diff A B`, `bundle catalog-sources FILE`, and the hidden `bundle schema` that packaging writes to share/bundle/bundle.schema.json. */
export function addImageSetCommands(program: Command): void {
  const diff = program
    .command('diff')
    .description(
      'Show what changed from bundle A to bundle B: images and charts added, removed or with another digest, blobs shared and new, with bytes (reads each bundle.json as "inspect" does; nothing is verified). With -f FILE BUNDLE, A is what the bundle file resolves to (as "create -f FILE --dry-run" with the same flags: manifests fetched, no other layer; --release, --image, --version, --arch, the registry flags... add to or override the file as there) and B the bundle: "+" is what the bundle has that the file does not, "-" the reverse.',
    )
    .usage('[options] A.bundle B.bundle | -f bundle.yaml BUNDLE')
    .argument('[a]', 'the older bundle (with -f: the bundle to compare the file with)')
    .argument('[b]', 'the newer bundle')
    .option(
      '-f, --file <bundle.yaml>',
      'a bundle file (or ImageSetConfiguration), resolved as "bundle create -f FILE --dry-run" resolves it, with its registry settings',
    )
    .addOption(updateGraphOption());
  // create's own flags, so -f resolves here as "create -f FILE --dry-run ..." does
  const resolving = [...contentOptions(), ...registryOptions()];
  addOptions(diff, resolving)
    .option('--quiet', 'no progress output while -f resolves')
    .option('--json', 'print as JSON')
    .action(
      async (
        a: string | undefined,
        b: string | undefined,
        o: CreateFlags & { json?: boolean; quiet?: boolean },
        cmd: Command,
      ) => {
        const usage = o.file
          ? (a === undefined || b !== undefined) &&
            'with -f, give one bundle: bundle diff -f bundle.yaml B.bundle'
          : (a === undefined || b === undefined) &&
            'give two bundles: bundle diff A.bundle B.bundle (or -f bundle.yaml B.bundle)';
        if (usage) cmd.error(`error: ${usage}`, { exitCode: 2, code: 'commander.missingArgument' });
        const stray = o.file
          ? undefined
          : resolving.find((opt) => cmd.getOptionValueSource(opt.attributeName()) === 'cli');
        if (stray)
          cmd.error(
            `error: ${stray.long} goes with -f: it shapes what the file resolves to, and two bundles are read as they are`,
            { exitCode: 2, code: 'commander.conflictingOption' },
          );
        // the bundle first: a wrong path is said before any registry is asked
        const to = o.file ? a! : b!;
        const fromBundle = o.file ? undefined : await readBundleManifest(a!);
        const toManifest = await readBundleManifest(to);
        if (o.file) await askCredsPassword(o);
        const from = fromBundle ?? (await resolveFile(o, cmd));
        const d = diffContents(from, toManifest, [o.file ?? a!, to]);
        process.stdout.write(o.json ? JSON.stringify(d, null, 2) + '\n' : formatDiff(d));
      },
    );

  program
    .command('catalog-sources')
    .description(
      'Print the CatalogSource of each operator catalog a bundle carries (by digest, for "oc apply -f -" once the bundle is loaded on every node); reads bundle.json as "inspect" does.',
    )
    .argument('<file>')
    .option('--namespace <ns>', 'the namespace of the CatalogSources', 'openshift-marketplace')
    .action(async (file: string, o: { namespace: string }) => {
      const objects = catalogSources((await readBundleManifest(file)).images, o.namespace);
      if (objects.length === 0)
        throw new OciError(
          'NOT_FOUND',
          `${file} carries no operator catalog (bundle create -f with operators:)`,
        );
      process.stdout.write(objects.map((x) => stringifyYaml(x)).join('---\n'));
    });

  program
    .command('schema', { hidden: true })
    .description('print the JSON Schema of "bundle create -f" files')
    .action(() => {
      process.stdout.write(JSON.stringify(BUNDLE_FILE_SCHEMA, null, 2) + '\n');
    });
}
