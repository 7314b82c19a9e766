import { Command } from 'commander';
import { BaseError, addCompletionCommand, assertRegularFile, escapeControls, formatPlatform, runCli } from '@offline-bundle/oci';
import { extractBundle, loadTrust, readHeader, verifyBundle, type BundleManifest } from '@offline-bundle/format';
import { formatBytes, plural } from '@offline-bundle/status';
import { Progress } from './progress.js';
import { TOOL_VERSION } from './version.js';
import { collect, digestArg } from './args.js';
import { addClusterCommands } from './cluster.js';
import { addCacheCommands } from './cache-command.js';
import { addManCommand } from './man.js';
import { addAgentImageCommands } from './agent-image-command.js';
import { addKeygenCommand } from './commands/keygen.js';
import { addCreateCommand } from './commands/create.js';

// At the factory a key others could change is worth a warning; the agent refuses one.
const warn = (message: string) => process.stderr.write(`bundle: warning: ${escapeControls(message)}\n`);

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
    release: m.release,
    images: m.images.map((i) => ({ reference: i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`, digest: i.digest, platforms: i.platforms.map(formatPlatform), ...(i.component ? { component: i.component } : {}) })),
    blobs: m.blobs.length,
    releaseSignatures: (m.release.signatures ?? []).map((s, i) => ({ configMapKey: m.release.digest ? `${m.release.digest.replace(':', '-')}-${i + 1}` : `signature-${i + 1}`, digest: s.digest, keyIds: s.keyIds })),
    totals: m.totals,
    creator: m.creator,
    signer: m.signer,
  };
}

function printSummary(m: BundleManifest, fileBytes: number): void {
  const r = m.release;
  const lines = [
    `release:   ${r.name} (version ${r.version}, ${r.arch})`,
    ...(r.image ? [`image:     ${r.image}`, `digest:    ${r.digest}`] : []),
    `upgrades from: ${r.upgradeFrom.length ? r.upgradeFrom.join(', ') : 'any version'}`,
    ...(r.image ? [`release signatures: ${r.signatures?.length ? r.signatures.map((s, i) => `signature-${i + 1} by key ${s.keyIds.join(',')} (${s.digest})`).join('; ') : 'none (the cluster will refuse the update without --force: rebuild with --release-signature or --signature-store)'}`] : []),
    `signer:    ${m.signer.fingerprint} (${m.signer.algorithm})`,
    `created:   ${m.creator.createdAt} by ${m.creator.tool} ${m.creator.version}`,
    `sizes:     layout ${formatBytes(m.totals.layoutBytes)}, file ${formatBytes(fileBytes)}, image store ~${formatBytes(m.totals.imageStoreBytes)}`,
    ...(m.agent ? [`agent:     bundle-agent ${m.agent.version} (${m.agent.repository}@${m.agent.digest}); nodes switch to it once Ready`] : []),
    `images (${m.images.length}), blobs: ${m.blobs.length}`,
    ...m.images.map((i) => `  ${i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`}  ${i.platforms.map(formatPlatform).join(',')}${i.component ? `  [${i.component}]` : ''}`),
  ];
  // inspect shows bundle.json before anything is verified: its strings must not drive the terminal
  process.stdout.write(lines.map(escapeControls).join('\n') + '\n');
}

export function buildProgram(): Command {
  const program = new Command('bundle')
    .description('Build, inspect and verify signed offline bundles: one file that carries a release and its images to clusters without a registry.')
    .version(TOOL_VERSION)
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ sortOptions: false });

  addKeygenCommand(program);
  addCreateCommand(program);

  program.command('inspect')
    .description('Show what a bundle holds (reads only its first frames; nothing is verified: use "bundle verify").')
    .argument('<file>')
    .option('--json', 'print as JSON')
    .action(async (file: string, o: { json?: boolean }) => {
      const size = (await assertRegularFile(file))?.size ?? 0;
      const { manifest } = await readHeader(file);
      if (o.json) process.stdout.write(JSON.stringify(summary(manifest), null, 2) + '\n');
      else printSummary(manifest, size);
    });

  const trustOptions = (cmd: Command) => cmd
    .option('--key <pub>', 'trusted public key (repeatable)', collect)
    .option('--digest <sha256>', 'expected sha256 of the whole file (from NAME.bundle.sha256)', digestArg)
    .option('--json', 'print the result as JSON');

  trustOptions(program.command('verify')
    .description('Check a bundle completely: signature, every entry\'s digest and size, structure. Exit 0 only when valid.')
    .argument('<file>'))
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .action(async (file: string, o: { key?: string[]; digest?: string; json?: boolean; quiet?: boolean }) => {
      await assertRegularFile(file);
      const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warn });
      const progress = new Progress({ quiet: o.quiet });
      const v = await verifyBundle(file, { trust, onProgress: fileProgress(progress, `verifying ${file}`) }).finally(() => progress.finish());
      if (o.json) process.stdout.write(JSON.stringify({ valid: true, digest: v.fileDigest, size: v.fileSize, signer: v.signer?.fingerprint ?? null, release: v.manifest.release }) + '\n');
      else process.stdout.write(escapeControls(`valid: ${v.manifest.release.name} ${v.manifest.release.arch}, ${plural(v.manifest.images.length, 'image')}, ${v.fileDigest}${v.signer ? `, signed by ${v.signer.source}` : ''}`) + '\n');
    });

  trustOptions(program.command('extract')
    .description('Verify and unpack a bundle into DIR as an OCI image layout (plus bundle.json). On failure DIR holds nothing of it.')
    .argument('<file>')
    .argument('<dir>'))
    .option('--quiet', 'no progress output (progress goes to stderr, also with --json)')
    .action(async (file: string, dir: string, o: { key?: string[]; digest?: string; json?: boolean; quiet?: boolean }) => {
      await assertRegularFile(file);
      const progress = new Progress({ quiet: o.quiet });
      const trust = await loadTrust(o.key ?? [], o.digest, { onUnsafeKey: warn });
      const v = await extractBundle(file, dir, { trust, onProgress: fileProgress(progress, `extracting ${file}`) }).finally(() => progress.finish());
      if (o.json) process.stdout.write(JSON.stringify({ extracted: dir, digest: v.fileDigest, images: v.manifest.images.length, blobs: v.manifest.blobs.length }) + '\n');
      else process.stdout.write(escapeControls(`extracted ${plural(v.manifest.images.length, 'image')} to ${dir} (OCI layout; e.g. skopeo inspect oci:${dir}:${v.manifest.images[0] ? (v.manifest.images[0].tag ? `${v.manifest.images[0].repository}:${v.manifest.images[0].tag}` : `${v.manifest.images[0].repository}@${v.manifest.images[0].digest}`) : 'REF'})`) + '\n');
    });

  addClusterCommands(program);
  addCacheCommands(program);
  addAgentImageCommands(program);
  addCompletionCommand(program);
  addManCommand(program);

  return program;
}

export function main(argv: string[]): Promise<number> {
  return runCli(buildProgram(), argv, (err) => {
    const own = (err as { code?: unknown })?.code;
    const code = err instanceof BaseError ? (err.code as string) : typeof own === 'string' && /^[A-Z_]+$/.test(own) ? own : 'ERROR';
    // Errors are one line: some library messages carry newlines (code frames, stacks), and
    // quote entry names and other untrusted strings, whose control characters are escaped.
    const message = escapeControls(String((err as Error)?.message ?? err).replace(/\s*\n\s*/g, ' ').trim());
    // a command that already printed its JSON result (cluster status not ready) adds no second document
    if (argv.includes('--json') && !(err as { reported?: boolean })?.reported) process.stdout.write(JSON.stringify({ error: { code, message } }) + '\n');
    process.stderr.write(`bundle: ${code}: ${message}\n`);
    const exit = (err as { exitCode?: unknown })?.exitCode;
    return code === 'INTERRUPTED' && typeof exit === 'number' ? exit : 1;
  });
}

process.exitCode = await main(process.argv);
