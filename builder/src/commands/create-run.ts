// `bundle create`'s run, in its phases: the flags made whole, the stops wired, the output
// checked; then a plan only (--dry-run) or the bundle, its agent image, its parts and the summary.
import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Command } from 'commander';
import { OciError } from '@offline-bundle/oci';
import { deltaFacts, readPassphrase } from '@offline-bundle/format';
import { plural } from '@offline-bundle/cli';
import { createBundle, type CreateOptions } from '../create.js';
import {
  applyBundleFile,
  requireKeyAndOutput,
  type CreateFlags,
} from '../image-set/create-options.js';
import { reportPlan } from '../image-set/plan.js';
import { Progress } from '../progress.js';
import { askCredsPassword } from '../create-flags.js';
import { reportSidecar, writeSidecar } from './agent-image.js';
import { assertNoParts } from './split.js';
import { splitInPlace } from '../split.js';
import { SIGNAL_EXIT, type StopSignal } from './signal-exit.js';

/** create's flags as this run reads them (the rest go to createBundle as they are). */
type CreateCommandFlags = CreateFlags & {
  key: string;
  output: string;
  force?: boolean;
  splitSize?: number;
  passphraseFile?: string;
  releaseSignature?: string[];
  quiet?: boolean;
  json?: boolean;
};

/** The flags with what applyBundleFile found and the run's own progress and stop, as createBundle takes them. */
type CreateInputs = CreateCommandFlags & {
  images?: string[];
  imageWhere: string[];
  charts?: string[];
  chartWhere: string[];
  releaseSignatures?: string[];
  progress: Progress;
  signal: AbortSignal;
};

/** create's warnings on stderr, shown even with --quiet: the cluster admin must fix (or weigh) these before the upgrade. */
function printWarnings(warnings: { kind: string; object: string; message: string }[]): void {
  for (const w of warnings) process.stderr.write(`warning: ${w.kind}: ${w.object}: ${w.message}\n`);
}

export async function runCreate(o: CreateCommandFlags, cmd: Command): Promise<void> {
  const progress = new Progress({ quiet: o.quiet });
  const { imageWhere, chartWhere } = await applyBundleFile(o, cmd, (m) => progress.log(m));
  requireKeyAndOutput(o, cmd);
  const signal = abortOnSignals();
  // before anything else: a --passphrase-file pipe may keep it waiting, which a stop ends
  const passphrase = await readPassphrase(o.passphraseFile, process.env, signal);
  await refuseExistingOutput(o);
  await askCredsPassword(o);
  const inputs: CreateInputs = {
    ...o,
    images: o.image,
    imageWhere,
    charts: o.chart,
    chartWhere,
    releaseSignatures: o.releaseSignature,
    progress,
    signal,
  };
  if (o.dryRun) {
    const plan = await createBundle({ ...inputs, key: '', output: '' } as CreateOptions & {
      dryRun: true;
    });
    reportPlan(plan, !!o.json);
    if (!o.json) printWarnings(plan.warnings ?? []);
    return;
  }
  const r = await writeBundle(inputs, passphrase);
  // the agent image beside the bundle too, for nodes with no agent yet (replaced with the bundle)
  const sidecar = r.manifest.agent
    ? await writeSidecar(r.output, {
        key: o.key,
        passphraseFile: o.passphraseFile,
        force: true,
        signal,
      })
    : undefined;
  if (sidecar && !o.quiet) reportSidecar(sidecar, !!o.json);
  const parts = await splitIfLarger(r, o, cmd, signal);
  if (o.json) process.stdout.write(JSON.stringify(createdSummary(r, parts, sidecar)) + '\n');
  else printWarnings(r.warnings);
}

/** The bundle written, signed with the key `passphrase` unlocks. */
function writeBundle(inputs: CreateInputs, passphrase: string | undefined) {
  return createBundle({
    ...inputs,
    ...(passphrase !== undefined ? { passphrase } : {}),
  } as CreateOptions & { dryRun?: false });
}
type Created = Awaited<ReturnType<typeof writeBundle>>;

/** Ctrl-C, SIGTERM or SIGHUP abort the build: the temp file goes, the exit code names the signal. */
function abortOnSignals(): AbortSignal {
  const ac = new AbortController();
  const stop = (signal: StopSignal) =>
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
  return ac.signal;
}

async function refuseExistingOutput(o: CreateCommandFlags): Promise<void> {
  // a directory is left to the write's own check, which names that problem
  if (!o.dryRun && !o.force && (await stat(o.output).catch(() => undefined))?.isFile()) {
    throw new OciError('OUTPUT_EXISTS', `${o.output} exists: pass --force to replace it`);
  }
  if (o.splitSize && !o.force) await assertNoParts(o.output);
}

/** --split-size: the written bundle cut into parts in place, when it is larger than one part. */
async function splitIfLarger(
  r: Created,
  o: CreateCommandFlags,
  cmd: Command,
  signal: AbortSignal,
): Promise<string[] | undefined> {
  // a bundle that fits one part stays NAME.bundle: a lone part-001-of-001 is only another name
  const parts =
    o.splitSize && r.fileSize > o.splitSize
      ? (await splitInPlace(r.output, o.splitSize, r.fileDigest, signal)).parts
      : undefined;
  if (parts && !o.quiet)
    process.stderr.write(
      `split into ${plural(parts.length, 'part')}: ${parts.map((p) => basename(p)).join(', ')}\n`,
    );
  else if (o.splitSize && !o.quiet)
    process.stderr.write(
      `not split: ${basename(r.output)} (${r.fileSize} bytes) is no larger than ${cmd.getOptionValueSource('splitSize') === 'cli' ? '--split-size' : "the file's archiveSize"} (${o.splitSize} bytes): one file\n`,
    );
  return parts;
}

/** The --json summary of a written bundle. */
function createdSummary(
  r: Created,
  parts: string[] | undefined,
  sidecar: Awaited<ReturnType<typeof writeSidecar>> | undefined,
) {
  return {
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
  };
}
