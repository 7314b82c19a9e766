// tier: unit
// The status file across agent versions: an agent before 70d0cb9 took a file whose bundle held
// anything but strings for damaged (STATUS_DAMAGED) and started from an empty status, its
// history lost; the agent-switch guard rolls back to such an agent. The lists of bundle (path
// #43, fromPeers #22) are written as strings it accepts, read back as lists, and a newer
// agent's field this one does not know is dropped, not the whole file.
import t from 'tap';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  CONDITION_STATUSES,
  HISTORY_STATES,
  PHASES,
  emptyStatus,
  readStatusFile,
  writeStatusFile,
  type NodeStatus,
} from '@offline-bundle/status';
import { tmpdir } from './lib.js';

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
const isString = (v: unknown): v is string => typeof v === 'string';
const isCount = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** The check of the agents before 70d0cb9, as `git show 2d1a551:packages/status/src/file.ts` has it (a fixture: what they still run). */
function previousStatusDefect(v: unknown): string | undefined {
  if (!isObject(v)) return 'not a JSON object';
  if (!(PHASES as readonly unknown[]).includes(v.phase)) return 'unknown phase';
  if (!isString(v.node) || !isString(v.message) || !isString(v.updatedAt))
    return 'node, message or updatedAt is not a string';
  const p = v.progress;
  if (
    !isObject(p) ||
    !['bytesDone', 'bytesTotal', 'imagesDone', 'imagesTotal'].every((k) => isCount(p[k]))
  )
    return 'progress is not four counts';
  const conditionOk = (c: unknown) =>
    isObject(c) &&
    isString(c.type) &&
    (CONDITION_STATUSES as readonly unknown[]).includes(c.status) &&
    isString(c.reason) &&
    isString(c.message);
  if (!Array.isArray(v.conditions) || !v.conditions.every(conditionOk))
    return 'conditions are not a list of conditions';
  const entryOk = (h: unknown) =>
    isObject(h) &&
    isString(h.version) &&
    (HISTORY_STATES as readonly unknown[]).includes(h.state) &&
    isString(h.at);
  if (!Array.isArray(v.history) || !v.history.every(entryOk))
    return 'history is not a list of releases';
  if (v.bundle !== undefined && !(isObject(v.bundle) && Object.values(v.bundle).every(isString)))
    return 'bundle is not a list of names';
  const w = v.writer;
  if (
    w !== undefined &&
    !(
      isObject(w) &&
      Number.isInteger(w.pid) &&
      isString(w.heartbeatAt) &&
      !Number.isNaN(Date.parse(w.heartbeatAt)) &&
      isCount(w.heartbeatSeconds)
    )
  )
    return 'writer is not a process record';
  return undefined;
}

const history: NodeStatus['history'] = [
  { version: '4.14.30', state: 'running', at: '2026-12-07T07:00:00.000Z' },
  { version: '4.16.2', state: 'loaded', at: '2026-12-07T07:01:00.000Z' },
];
const status = (bundle: Record<string, unknown>): NodeStatus => ({
  ...emptyStatus('w1'),
  phase: 'Ready',
  history,
  bundle: bundle as unknown as NodeStatus['bundle'],
});
const PATH_BUNDLE = {
  file: '/media/usb/path.bundle',
  version: '4.16.2',
  arch: 'amd64',
  path: ['4.15.40', '4.16.2'],
};

t.test(
  "a file this agent writes with an update path and peers passes the previous agents' check, and reads back whole",
  async (t) => {
    const file = path.join(await tmpdir(t, 'ob-status-compat-'), 'status.json');
    await writeStatusFile(
      file,
      status({ ...PATH_BUNDLE, media: 'peers', fromPeers: ['worker-2', 'worker-3'] }),
    );
    const raw: unknown = JSON.parse(await readFile(file, 'utf8'));
    t.equal(
      previousStatusDefect(raw),
      undefined,
      'an agent rolled back to reads it, its history kept',
    );
    const back = await readStatusFile(file);
    t.same(back?.bundle?.path, ['4.15.40', '4.16.2'], 'the path comes back as a list');
    t.same(back?.bundle?.fromPeers, ['worker-2', 'worker-3'], 'and the peers');
    t.notOk(
      Object.keys(back?.bundle ?? {}).some((k) => k.endsWith('List')),
      "the file's form stays in the file",
    );
    t.same(back?.history, history);
  },
);

t.test(
  "files of 70d0cb9 (a list under bundle) and a newer agent's unknown field read back; the status is not discarded",
  async (t) => {
    const dir = await tmpdir(t, 'ob-status-compat-');
    const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
      ['bundle.path a list, as 70d0cb9 wrote it', PATH_BUNDLE, PATH_BUNDLE],
      [
        'bundle.fromPeers a list, as every agent since #22 wrote it',
        { file: 'x', fromPeers: ['worker-2'] },
        { file: 'x', fromPeers: ['worker-2'] },
      ],
      [
        'a field a newer agent adds, not a string',
        { file: 'x', version: '4.16.2', future: { a: 1 }, more: [1, 2] },
        { file: 'x', version: '4.16.2' },
      ],
      ['a list not of strings', { file: 'x', path: [1, 2] }, { file: 'x' }],
    ];
    for (const [what, bundle, expected] of cases) {
      const file = path.join(dir, 'status.json');
      await writeFile(file, JSON.stringify(status(bundle)));
      const back = await readStatusFile(file);
      t.same(back?.bundle, expected, what);
      t.same(back?.history, history, `${what}: the history kept`);
    }
  },
);

t.test('an older agent that replaces the bundle takes its path with it', async (t) => {
  const file = path.join(await tmpdir(t, 'ob-status-compat-'), 'status.json');
  await writeStatusFile(file, status(PATH_BUNDLE));
  const raw = JSON.parse(await readFile(file, 'utf8')) as { bundle: Record<string, unknown> };
  // what an agent before #43 does on its next load: a bundle of its own, none of the old fields
  raw.bundle = { file: '/media/usb/other.bundle', version: '4.16.3' };
  await writeFile(file, JSON.stringify(raw));
  t.equal((await readStatusFile(file))?.bundle?.path, undefined, 'no path of another bundle');
});
