import { stat } from 'node:fs/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  checkSignature,
  loadTrust,
  openBundle,
  parseManifestBytes,
  readLayoutDescription,
  verifyBundle,
  type BundleManifest,
  type BundleSource,
  type Trust,
} from '@offline-bundle/format';
import { isDigest } from '@offline-bundle/oci';
import { escapeControls } from '@offline-bundle/host';
import { plural } from '@offline-bundle/cli';
import {
  BundleFileStore,
  LayoutStore,
  catalogOf,
  servedNames,
  startRegistry,
} from '@offline-bundle/registry';
import {
  DEFAULT_CONFIG_PATH,
  loadConfig,
  parseLoopbackAddress,
  type AgentConfig,
} from '../config.js';
import { AgentError } from '../errors.js';
import { assertBundleFile } from '../load/bundle-file.js';
import { untilSignal } from './until-signal.js';

interface ServeFlags {
  listen: { host: string; port: number };
  key?: string[];
  digest?: string;
  config?: string;
  json?: boolean;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

function listenArg(v: string): { host: string; port: number } {
  const addr = parseLoopbackAddress(v);
  if (!addr)
    throw new InvalidArgumentError(
      'must be a loopback address such as 127.0.0.1:5000 (the registry never listens beyond this node)',
    );
  return addr;
}

/** `bundle-agent serve PATH`: only the registry, over a bundle file or a layout. */
export function addServeCommand(program: Command): void {
  program
    .command('serve')
    .description(
      'Only the registry: serve a bundle file (random access through its seek index, after a full verification) or a staged/extracted layout; prints the address and runs until interrupted.',
    )
    .argument('<path>', 'NAME.bundle or a directory made by "bundle extract" or by staging')
    .addOption(
      new Option('--listen <addr>', 'loopback address to listen on, as HOST:PORT')
        .argParser(listenArg)
        .default({ host: '127.0.0.1', port: 0 }, 'a free port on 127.0.0.1'),
    )
    .option('--key <pub>', "trusted public key (repeatable; default: the config's)", collect)
    .option('--digest <sha256>', 'expected whole-file digest of a bundle file', (v: string) => {
      if (!isDigest(v))
        throw new InvalidArgumentError('must be sha256:<64 hex digits> (see NAME.bundle.sha256)');
      return v;
    })
    .option('--config <file>', 'configuration file for default trust (optional)')
    .option('--json', 'print the address and names as JSON')
    .addHelpText(
      'after',
      `
Names: an image of REGISTRY/PATH is served as ADDRESS/PATH (docker://127.0.0.1:PORT/acme/app:v1
for 127.0.0.1:5000/acme/app:v1) and as ADDRESS/REGISTRY/PATH with the registry's ":" written
"_" (127.0.0.1:PORT/127.0.0.1_5000/acme/app:v1; the name the agent's mirrors use). When two
registries in the bundle hold the same PATH, ADDRESS/PATH is refused (NAME_UNKNOWN naming both)
and only the second form serves them. The names are printed at start.`,
    )
    .action(serve);
}

async function serve(path: string, o: ServeFlags): Promise<void> {
  let config: AgentConfig | undefined;
  if (o.config || (!o.key && !o.digest)) config = await loadConfig(o.config ?? DEFAULT_CONFIG_PATH);
  const trust = await loadTrust(
    o.key ?? config?.trust.keys ?? [],
    o.digest ?? config?.trust.digest,
  );
  const isDir = await stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
  let source: BundleSource | undefined;
  // the opener closes the source, also when verifying or serving it fails
  try {
    let opened;
    if (isDir) opened = await openLayout(path, trust);
    else {
      await assertBundleFile(path);
      // one open for the verifying pass and the serving after it: the same bytes, read twice
      source = await openBundle(path);
      opened = await openVerified(source, trust);
    }
    const { manifest, store } = opened;
    const catalog = catalogOf(manifest);
    const reg = await startRegistry({ store, catalog, host: o.listen.host, port: o.listen.port });
    announce(manifest, reg.address, servedNames(catalog, reg.address), o.json === true);
    const { done } = untilSignal();
    await done;
    await reg.close();
    await store.close();
  } finally {
    await source?.close();
  }
}

/** A staged or extracted layout: its bundle.json's signature checked, its blobs served from disk. */
async function openLayout(path: string, trust: Trust) {
  const { manifestBytes: bytes, signature: sig } = await readLayoutDescription(path);
  const manifest = parseManifestBytes(bytes);
  if (!trust.keys)
    throw new AgentError(
      'NoTrust',
      'serving a layout needs --key (its bundle.json signature is checked)',
    );
  checkSignature(bytes, sig, manifest.signer.fingerprint, trust);
  return { manifest, store: await LayoutStore.open(path, catalogOf(manifest)) };
}

/** A bundle file, verified whole first, then served by random access through its seek index. */
async function openVerified(source: BundleSource, trust: Trust) {
  const v = await verifyBundle(source, { trust, frameDigests: true });
  const manifest = v.manifest;
  const store = await BundleFileStore.open(source, manifest, catalogOf(manifest), {
    seekIndex: v.seekIndex,
    frameDigests: v.frameDigests!,
  });
  return { manifest, store };
}

function announce(
  manifest: BundleManifest,
  address: string,
  names: ReturnType<typeof servedNames>,
  json: boolean,
): void {
  if (json)
    process.stdout.write(
      JSON.stringify({ address, images: manifest.images.length, repositories: names }) + '\n',
    );
  else
    process.stdout.write(
      [
        `serving ${plural(manifest.images.length, 'image')} of ${manifest.release.name} on ${address}`,
        ...names.map((n) => `  ${n.source}: ${n.names.join(' or ')}`),
      ]
        .map(escapeControls)
        .join('\n') + '\n',
    );
}
