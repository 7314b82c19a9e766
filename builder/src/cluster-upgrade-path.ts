/**
 * `bundle cluster upgrade` of a bundle that carries an update path (EUS to EUS, #43): the plan
 * (every step in order, its state and the oc command that does the same) is printed before
 * anything changes, then what this run did. Run again per step: see packages/cluster upgrade-path.
 */
import { ClusterError } from '@offline-bundle/kube';
import { escapeControls } from '@offline-bundle/host';
import {
  gateLine,
  hopLine,
  pinnedSetsLine,
  upgradePath,
  type AdminBundle,
  type PathUpgradeResult,
} from '@offline-bundle/cluster';
import type { AdminApis } from '@offline-bundle/kube';

const STATE_WIDTH = 9;

/** The plan as numbered lines, each step's oc command beneath it. */
function planText(r: PathUpgradeResult): string {
  // what the cluster wrote (summary, gate reasons) is escaped line by line
  const head = [
    hopLine(r),
    r.rollup.summary,
    `plan${r.dryRun ? ' (dry run: nothing is changed)' : ''}, every step in order (state: done, now = this run, waiting = on the cluster, blocked = on you, later):`,
  ];
  const steps = r.steps.flatMap((s, i) => [
    `${`  ${String(i + 1).padStart(2)}. [${s.state}]`.padEnd(STATE_WIDTH + 8)} ${s.text}`,
    `        ${s.oc}`,
  ]);
  return [...head, ...steps].map((l) => `${escapeControls(l)}\n`).join('');
}

/** What the run did, and what to do next. */
function outcome(r: PathUpgradeResult, file: string): string {
  const hop = r.path[r.hop - 1];
  const again = `run "bundle cluster upgrade ${file}" again`;
  const lines: string[] = [];
  if (r.gate) lines.push(gateLine(r.gate));
  if (r.pinned) lines.push(pinnedSetsLine(r.pinned));
  if (r.dryRun && (r.state === 'started' || r.state === 'finished'))
    lines.push(
      r.blockers.length
        ? `a real run would refuse: ${r.blockers.map((e) => `${e.code}: ${e.message}`).join('; ')}`
        : 'a real run would do the steps marked now',
    );
  else if (r.state === 'started')
    lines.push(
      `started hop ${r.hop} of ${r.path.length}: ClusterVersion asks for ${hop!.version}; nothing else to do until its history says Completed, then ${again} (safe at any time: each run reads where the cluster is and does the next step)`,
    );
  else if (r.state === 'waiting')
    lines.push(
      `waiting: hop ${r.hop} of ${r.path.length} (to ${hop!.version}) is under way; nothing changed; ${again} once ClusterVersion's history says ${hop!.version} Completed`,
    );
  else if (r.state === 'finished')
    lines.push(
      `every hop completed: the cluster runs ${r.path.at(-1)!.version}; unpaused ${r.steps
        .filter((s) => s.kind === 'unpause' && s.state === 'now')
        .map((s) => s.oc.split(' ')[2])
        .join(', ')}, whose nodes now update once`,
    );
  else
    lines.push(
      `nothing to do: the cluster runs ${r.path.at(-1)!.version} and no pool is paused for it`,
    );
  return lines.map((l) => `${escapeControls(l)}\n`).join('');
}

/** Runs the next step (or the dry run) and prints plan and outcome, or the JSON of both. */
export async function runPathUpgrade(
  api: AdminApis,
  b: AdminBundle,
  file: string,
  o: { dryRun?: boolean; selector?: string; ack?: string[]; json?: boolean },
): Promise<void> {
  const r = await upgradePath(api, b, {
    dryRun: o.dryRun === true,
    ...(o.selector ? { selector: o.selector } : {}),
    ...(o.ack ? { ack: o.ack } : {}),
    ...(o.json ? {} : { onPlan: (p: PathUpgradeResult) => process.stdout.write(planText(p)) }),
  });
  if (o.json) {
    const out = {
      dryRun: r.dryRun,
      path: r.path,
      running: r.running ?? null,
      hop: r.hop,
      state: r.state,
      steps: r.steps,
      blockers: r.blockers.map((e) => ({ code: e.code, message: e.message })),
      summary: r.rollup.summary,
      gate: r.gate ?? null,
      pinnedImageSets: r.pinned ?? null,
    };
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  } else process.stdout.write(outcome(r, file));
  // a dry run names every blocker, after the plan; its exit says whether a real run would go through
  if (r.dryRun && r.blockers.length) {
    const e =
      r.blockers.length === 1
        ? r.blockers[0]!
        : new ClusterError(
            r.blockers[0]!.code,
            `${r.blockers.length} things stand in the way: ${r.blockers.map((x) => `${x.code}: ${x.message}`).join('; ')}`,
          );
    throw Object.assign(e, { reported: o.json === true });
  }
}
