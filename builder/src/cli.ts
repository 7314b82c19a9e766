import { open, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { Command, Option, InvalidArgumentError } from 'commander';
import { OciError, formatPlatform } from '@offline-bundle/oci';
import { BaseError, escapeControls, writeFileAtomic } from '@offline-bundle/host';
import { addCompletionCommand, runCli } from '@offline-bundle/cli';
import {
  FORMAT_VERSIONS,
  FormatError,
  PIECE_BYTES,
  PASSPHRASE_ENV,
  VERSIONED_FEATURES,
  WRITABLE_VERSIONS,
  assertTrust,
  extractBundle,
  generateKeyPair,
  loadPublicKey,
  loadTrust,
  readHeader,
  readPassphrase,
  baseEntries,
  baseLabel,
  deltaFacts,
  unwritableVersion,
  verifyBundle,
  withBundle,
  type BundleManifest,
} from '@offline-bundle/format';
import { createBundle, type CreateOptions } from './create.js';
import { PIECE_MODES } from './piece-mode.js';
import { BLOB_ORDERS } from './blob-order.js';
import { applyBundleFile, requireKeyAndOutput } from './image-set/create-options.js';
import { reportPlan } from './image-set/plan.js';
import { addImageSetCommands } from './image-set/commands.js';
import { formatBytes, plural } from '@offline-bundle/cli';
import { Progress } from './progress.js';
import { TOOL_VERSION } from './version.js';
import { pathLines, pathOf, upgradesFromLine } from './release-path.js';
import { collect, digestArg } from './args.js';
import {
  addOptions,
  askCredsPassword,
  contentOptions,
  registryOptions,
  updateGraphOption,
} from './create-flags.js';
import { addClusterCommands } from './cluster.js';
import { addCacheCommands } from './cache-command.js';
import { addManCommand } from './man.js';
import { addAgentImageCommands, reportSidecar, writeSidecar } from './agent-image-command.js';
import { addSplitCommand, assertBundlePath, assertNoParts } from './split-command.js';
import { SPLIT_SIZE_HELP, parseSize, splitInPlace } from './split.js';
import { addWriteMediaCommand } from './write-media-command.js';

// At the factory a key others could change is worth a warning; the agent refuses one.
const warn = (message: string) =>
  process.stderr.write(`bundle: warning: ${escapeControls(message)}\n`);
// 128 + the signal's number, as a shell reports a process the signal ended
// SIGHUP (the ssh session went away) stops the build as SIGTERM does: the temp file goes
const SIGNAL_EXIT = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 } as const;
const levelArg = (value: string) => {
  const n = Number(value);
  // the help promises 1-19; zstd would otherwise clamp other numbers silently
  if (!Number.isInteger(n) || n < 1 || n > 19)
    throw new InvalidArgumentError('must be a whole number from 1 to 19');
  return n;
};

const formatVersionArg = (value: string) => {
  const n = Number(value);
  const problem = /^\d+$/.test(value)
    ? unwritableVersion(n)
    : `"${value}" is not a format version; this tool writes ${WRITABLE_VERSIONS.join(', ')}`;
  if (problem) throw new InvalidArgumentError(problem);
  return n;
};
const blobOrderArg = (value: string) => {
  if (!(BLOB_ORDERS as readonly string[]).includes(value))
    throw new InvalidArgumentError(`must be ${BLOB_ORDERS.join(' or ')}`);
  return value;
};
const piecesArg = (value: string) => {
  if (!(PIECE_MODES as readonly string[]).includes(value))
    throw new InvalidArgumentError(`must be ${PIECE_MODES.join(' or ')}`);
  return value;
};
const PIECES_HELP = `digests per ${PIECE_BYTES >> 20} MiB piece of every blob longer than that, signed in bundle.json, so agents fetching from peers check and pass on each piece as it arrives: on (default) or none (for sites whose agents never use peers; saves some CPU-seconds per GiB while packing); older agents ignore them`;
const BLOB_ORDER_HELP = `the order blobs are written in: digest (default; every bundle-agent reads it) or pull (image by image as a runtime pulls them, so a node pulls each image while the rest is still read from the stick; needs format version 3, bundle-agent ${FORMAT_VERSIONS[VERSIONED_FEATURES['blobs in pull order']]!.minReader} or later)`;
const FORMAT_VERSION_HELP = `bundle.json's format version: ${[...WRITABLE_VERSIONS]
  .reverse()
  .map((v) => `${v} for bundle-agent ${FORMAT_VERSIONS[v]!.minReader} or later`)
  .join(
    ', ',
  )}; by default the oldest that carries what the bundle holds, so it reaches every agent that can use it ("bundle inspect" shows what a bundle needs)`;

const BASE_HELP =
  "make a delta against an earlier release of the same stream: its NAME.bundle, its parts, or only its bundle.json (signed or not: only its listing is read, to leave out the blobs it holds). The delta's signed bundle.json still lists every blob; a node fills the left-out ones from that release kept on its disk (staging.keep) and checks each against this bundle's digests, or refuses before writing anything. Needs format version 3 (bundle-agent 0.2.0)";

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

/** A progress callback for reading a file: the phase starts at the first call (when the total is known), "finishing" once all is read. */
function fileProgress(progress: Progress, phase: string): (done: number, total: number) => void {
  let started = false;
  return (done, total) => {
    if (!started) progress.start(phase, total);
    started = true;
    progress.update(done);
    if (done >= total) progress.phaseNote('finishing');
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

/** What a verified delta still needs from its base: said after "valid", each blob by digest with --json. */
function baseNeeds(m: BundleManifest): string {
  const d = deltaFacts(m);
  if (!d) return '';
  return `; a delta: every carried blob checked; it needs ${plural(d.totalBlobs - d.carriedBlobs, 'blob')} (${formatBytes(d.baseBytes)}) of ${baseLabel(d.base)} (${d.base.bundleJson}) on the node (--json lists them)`;
}

/** create's warnings on stderr, shown even with --quiet: the cluster admin must fix (or weigh) these before the upgrade. */
function printWarnings(warnings: { kind: string; object: string; message: string }[]): void {
  for (const w of warnings) process.stderr.write(`warning: ${w.kind}: ${w.object}: ${w.message}\n`);
}

/**
 * The private key, 0600 from its creation on. Never through what is at its name: a link planted
 * there (the directory shared, or someone else's) would carry the key, and a chmod after it, to
 * a file of its maker's choosing. --force writes a temp file beside it and renames it over.
 */
async function writePrivateKey(keyPath: string, pem: string, force: boolean): Promise<void> {
  const fail = (err: NodeJS.ErrnoException) => {
    throw new FormatError(
      'KEY_ERROR',
      err.code === 'EEXIST'
        ? `${keyPath} exists: pass --force to overwrite it`
        : `cannot write ${keyPath}: ${err.message}`,
    );
  };
  if (force) return writeFileAtomic(keyPath, pem, 0o600).catch(fail);
  // O_EXCL: a link at the name is refused like any other entry
  const fh = await open(keyPath, 'wx', 0o600).catch(fail);
  try {
    await fh.writeFile(pem);
  } finally {
    await fh.close();
  }
}

function buildProgram(): Command {
  const program = new Command('bundle')
    .description(
      'Build, inspect and verify signed offline bundles: one file that carries a release and its images to clusters without a registry. "bundle create -f bundle.yaml" declares a bundle in a file (or an oc-mirror ImageSetConfiguration); --dry-run lists what it would carry.',
    )
    .version(TOOL_VERSION)
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ sortOptions: false });

  program
    .command('keygen')
    .description(
      'Create a signing key pair: PREFIX.key (private, mode 0600; keep it at the factory) and PREFIX.pub (give it to every cluster).',
    )
    .requiredOption('--out <prefix>', 'path prefix for the two files')
    .addOption(
      new Option('--type <type>', 'key type')
        .choices(['ecdsa-p256', 'ed25519'])
        .default('ecdsa-p256'),
    )
    .option('--force', 'overwrite existing files')
    .option(
      '--passphrase-file <file>',
      `encrypt the private key with the passphrase on this file's first line (or set ${PASSPHRASE_ENV})`,
    )
    .option('--json', 'print the result as JSON')
    .action(
      async (o: {
        out: string;
        type: 'ecdsa-p256' | 'ed25519';
        force?: boolean;
        passphraseFile?: string;
        json?: boolean;
      }) => {
        const { privatePem, publicPem } = generateKeyPair(
          o.type,
          await readPassphrase(o.passphraseFile),
        );
        const keyPath = `${o.out}.key`;
        const pubPath = `${o.out}.pub`;
        await writePrivateKey(keyPath, privatePem, o.force === true);
        await writeFileAtomic(pubPath, publicPem);
        const fp = (await loadPublicKey(pubPath)).fingerprint;
        if (o.json)
          process.stdout.write(
            JSON.stringify({
              privateKey: keyPath,
              publicKey: pubPath,
              type: o.type,
              fingerprint: fp,
            }) + '\n',
          );
        else
          process.stdout.write(
            `wrote ${keyPath} (private, 0600) and ${pubPath}\nfingerprint ${fp}\n`,
          );
      },
    );

  const create = program
    .command('create')
    .description('Build a bundle from a release image and/or images.')
    .option(
      '-f, --file <bundle.yaml>',
      'what goes into the bundle, declared in a file (its keys are these flags; see BUNDLE FILE in "man bundle" and bundle.schema.json), or an oc-mirror v2 ImageSetConfiguration; flags given here override it, repeatable ones add to its lists',
    )
    .addOption(updateGraphOption())
    .option(
      '--dry-run',
      "resolve every image and print the list with sizes; no bundle written, but the cache gets the manifests, the release image's layers (to read its payload) and each operator catalog image's layers (to read its catalog); no other layer fetched",
    );
  // what a dry run resolves (and so bundle diff -f): registered here in create's order, defined once
  addOptions(create, contentOptions())
    .option(
      '--upgrade-from <v>',
      "a version the cluster may run before this one (repeatable; added to the release's own list)",
      collect,
    )
    .option(
      '--release-signature <file>',
      'a signature of the release image (repeatable; a signature store\'s signature-N file): carried in the bundle for "bundle cluster prepare"',
      collect,
    )
    .option(
      '--signature-store <url>',
      'take every release signature from this store (file:// or https://…/signatures/openshift/release: <url>/sha256=<hex>/signature-N)',
    )
    .option(
      '--release-keyring <file>',
      'OpenPGP public keys (armored or binary) the release signatures must verify with; without it they are only checked to sign this release',
    )
    .option(
      '--key <file>',
      'private key (PEM) to sign with (see "bundle keygen"; required, here or in -f)',
    )
    .option(
      '--passphrase-file <file>',
      `the encrypted key's passphrase, on the file's first line (or set ${PASSPHRASE_ENV})`,
    )
    .option(
      '-o, --output <file>',
      'bundle file to write (NAME.bundle; required, here or in -f); NAME.bundle.sha256 is written beside it (and with --agent-image, bundle-agent-VERSION-ARCH.oci.tar and its .sig: see "bundle agent-image export")',
    )
    .option('--force', 'replace an existing output file')
    .option(
      '--split-size <size>',
      `write NAME.bundle.part-001-of-NNN files instead of one file: ${SPLIT_SIZE_HELP}. The bundle is written whole first, then cut into parts in place: onto a FAT32 stick, create on a local disk and "bundle split --out"`,
      parseSize,
    );
  addOptions(create, registryOptions())
    .option('--level <n>', 'zstd compression level (1-19)', levelArg, 3)
    .option('--format-version <n>', FORMAT_VERSION_HELP, formatVersionArg)
    .option('--base <bundle>', BASE_HELP)
    .option('--blob-order <order>', BLOB_ORDER_HELP, blobOrderArg)
    .option('--pieces <mode>', PIECES_HELP, piecesArg, 'on')
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .option('--json', 'print a JSON summary on stdout at the end')
    .addHelpText(
      'after',
      `
Examples:
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --registries-conf mirror.conf --key factory.key -o 4.14.38.bundle
  bundle create -f bundle.yaml --dry-run          # what the file brings, with sizes; no bundle written
  bundle create -f imageset-config.yaml --update-graph graph.json --key factory.key -o 4.14.bundle
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.38-x86_64 \\
      --signature-store https://mirror.openshift.com/pub/openshift-v4/signatures/openshift/release \\
      --release-keyring redhat-release.gpg --key factory.key -o 4.14.38.bundle
  bundle create --version 1.30.2 --image docker.io/rancher/k3s:v1.30.2-k3s1 \\
      --image oci:./app-layout:v2=registry.example.com/app:v2 --key factory.key -o k3s.bundle
  bundle create --release quay.io/openshift-release-dev/ocp-release:4.14.39-x86_64 \\
      --base 4.14.38.bundle --key factory.key -o 4.14.39-delta.bundle   # only what 4.14.38 lacks
  skopeo copy docker://registry.example.com/tool:v3 dir:./tool && \\
    bundle create --version 1.0 --image dir:./tool=registry.example.com/tool:v3 --key factory.key -o tool.bundle

Registry access (as podman and skopeo):
  proxy        HTTPS_PROXY, HTTP_PROXY, NO_PROXY (names, host:port, 10.0.0.0/8; or lower case); never for loopback
  TLS          system CAs plus *.crt of the first of ~/.config/containers/certs.d/HOST:PORT,
               /etc/containers/certs.d/HOST:PORT, /etc/docker/certs.d/HOST:PORT (*.cert + *.key there:
               a client certificate); --cert-dir DIR: that directory for every registry
  credentials  --creds, else --authfile (or REGISTRY_AUTH_FILE) alone, else $XDG_RUNTIME_DIR/containers/auth.json
               (/run/containers/$UID/auth.json), ~/.config/containers/auth.json, ~/.docker/config.json,
               ~/.dockercfg; credHelpers/credsStore run docker-credential-NAME from PATH
  podman store export first: podman save --format oci-archive -o app.tar IMAGE, then --image oci-archive:app.tar

Exit codes: 0 written, 1 error (one line: "bundle: CODE: message"), 2 usage, 129/130/143 interrupted (SIGHUP/SIGINT/SIGTERM).`,
    )
    .action(async (o, cmd: Command) => {
      const progress = new Progress({ quiet: o.quiet });
      const { imageWhere, chartWhere } = await applyBundleFile(o, cmd, (m) => progress.log(m));
      requireKeyAndOutput(o, cmd);
      const ac = new AbortController();
      const stop = (signal: keyof typeof SIGNAL_EXIT) =>
        ac.abort(
          Object.assign(new Error('interrupted: nothing written; a rerun resumes from the cache'), {
            name: 'AbortError',
            code: 'INTERRUPTED',
            exitCode: SIGNAL_EXIT[signal],
          }),
        );
      // on, not once: a second Ctrl-C while the temp file is being removed must not kill the process and leave it
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      process.on('SIGHUP', stop);
      // before anything else: a --passphrase-file pipe may keep it waiting, which a stop ends
      const passphrase = await readPassphrase(o.passphraseFile, process.env, ac.signal);
      // a directory is left to the write's own check, which names that problem
      if (!o.dryRun && !o.force && (await stat(o.output).catch(() => undefined))?.isFile()) {
        throw new OciError('OUTPUT_EXISTS', `${o.output} exists: pass --force to replace it`);
      }
      if (o.splitSize && !o.force) await assertNoParts(o.output);
      await askCredsPassword(o);
      if (o.dryRun) {
        const plan = await createBundle({
          ...o,
          images: o.image,
          imageWhere,
          charts: o.chart,
          chartWhere,
          releaseSignatures: o.releaseSignature,
          progress,
          signal: ac.signal,
          key: '',
          output: '',
        } as CreateOptions & { dryRun: true });
        reportPlan(plan, !!o.json);
        if (!o.json) printWarnings(plan.warnings ?? []);
        return;
      }
      const r = await createBundle({
        ...o,
        images: o.image,
        imageWhere,
        charts: o.chart,
        chartWhere,
        releaseSignatures: o.releaseSignature,
        progress,
        signal: ac.signal,
        ...(passphrase !== undefined ? { passphrase } : {}),
      });
      // the agent image beside the bundle too, for nodes with no agent yet (replaced with the bundle)
      const sidecar = r.manifest.agent
        ? await writeSidecar(r.output, {
            key: o.key,
            passphraseFile: o.passphraseFile,
            force: true,
            signal: ac.signal,
          })
        : undefined;
      if (sidecar && !o.quiet) reportSidecar(sidecar, !!o.json);
      // a bundle that fits one part stays NAME.bundle: a lone part-001-of-001 is only another name
      const parts =
        o.splitSize && r.fileSize > o.splitSize
          ? (await splitInPlace(r.output, o.splitSize, r.fileDigest, ac.signal)).parts
          : undefined;
      if (parts && !o.quiet)
        process.stderr.write(
          `split into ${plural(parts.length, 'part')}: ${parts.map((p) => basename(p)).join(', ')}\n`,
        );
      else if (o.splitSize && !o.quiet)
        process.stderr.write(
          `not split: ${basename(r.output)} (${r.fileSize} bytes) is no larger than ${cmd.getOptionValueSource('splitSize') === 'cli' ? '--split-size' : "the file's archiveSize"} (${o.splitSize} bytes): one file\n`,
        );
      if (o.json) {
        process.stdout.write(
          JSON.stringify({
            output: r.output,
            ...(parts ? { parts } : {}),
            digest: r.fileDigest,
            size: r.fileSize,
            images: r.images,
            blobs: r.blobs,
            frames: r.frames,
            release: r.manifest.release,
            totals: r.manifest.totals,
            ...(r.manifest.base ? { delta: deltaFacts(r.manifest) } : {}),
            ...(r.manifest.agent ? { agent: r.manifest.agent } : {}),
            ...(sidecar ? { agentSidecar: sidecar } : {}),
            signer: r.manifest.signer,
            warnings: r.warnings,
          }) + '\n',
        );
      } else {
        printWarnings(r.warnings);
      }
    });

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

  const trustOptions = (cmd: Command) =>
    cmd
      .option('--key <pub>', 'trusted public key (repeatable)', collect)
      .option(
        '--digest <sha256>',
        'expected sha256 of the whole file (from NAME.bundle.sha256)',
        digestArg,
      )
      .option('--json', 'print the result as JSON');

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
        const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warn });
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
        const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warn });
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

  addClusterCommands(program);
  addCacheCommands(program);
  addAgentImageCommands(program);
  addSplitCommand(program);
  addWriteMediaCommand(program);
  addCompletionCommand(program);
  addManCommand(program);
  addImageSetCommands(program);

  return program;
}

function main(argv: string[]): Promise<number> {
  return runCli(buildProgram(), argv, (err) => {
    const own = (err as { code?: unknown })?.code;
    const code =
      err instanceof BaseError
        ? (err.code as string)
        : typeof own === 'string' && /^[A-Z_]+$/.test(own)
          ? own
          : 'ERROR';
    // Errors are one line: some library messages carry newlines (code frames, stacks), and
    // quote entry names and other untrusted strings, whose control characters are escaped.
    const message = escapeControls(
      String((err as Error)?.message ?? err)
        .replace(/\s*\n\s*/g, ' ')
        .trim(),
    );
    // a command that already printed its JSON result (cluster status not ready) adds no second document
    if (argv.includes('--json') && !(err as { reported?: boolean })?.reported)
      process.stdout.write(JSON.stringify({ error: { code, message } }) + '\n');
    // a file's problems one a line (FILE:LINE (key): ...), then the error line sums them up
    const { lines, summary } = (err ?? {}) as { lines?: unknown; summary?: unknown };
    if (Array.isArray(lines) && typeof summary === 'string') {
      process.stderr.write(
        lines.map((l) => `  ${escapeControls(String(l).replace(/\s*\n\s*/g, ' '))}\n`).join('') +
          `bundle: ${code}: ${escapeControls(summary)}\n`,
      );
    } else {
      process.stderr.write(`bundle: ${code}: ${message}\n`);
    }
    const exit = (err as { exitCode?: unknown })?.exitCode;
    return code === 'INTERRUPTED' && typeof exit === 'number' ? exit : 1;
  });
}

process.exitCode = await main(process.argv);
