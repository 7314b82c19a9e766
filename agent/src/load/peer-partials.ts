// Which partial stagings a fetch from peers began (issue #41): a partial's resume marker names its
// bundle but not who staged it, and only a fetch's partial goes with its approval. A stick's
// partial of a bundle no admin approved stays for the stick's return. One empty file per
// bundle identity in the state directory: written before the fetch writes any entry, dropped
// when a stick's staging takes the partial over or the partial is gone.
import { readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs } from '@offline-bundle/host';
import type { AgentConfig } from '../config.js';
import { failureOf, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { withLoadLock } from '../state/lock.js';
import { dropPartialsOf } from './resume.js';

const dirOf = (stateDir: string) => join(stateDir, 'peer-partials');
// "sha256:<hex>" as a file name: the colon is no trouble on Linux, but the hex alone is plainer
const fileOf = (stateDir: string, identity: string) =>
  join(dirOf(stateDir), identity.replace(/^sha256:/, ''));
const IDENTITY_FILE = /^[0-9a-f]{64}$/;

/** A fetch from peers begins (or resumes) the partial staging of the bundle `identity`. */
export async function notePeerPartial(stateDir: string, identity: string): Promise<void> {
  await makeDirs(dirOf(stateDir));
  // empty: its name is the record, so a torn write cannot leave a wrong one
  await writeFile(fileOf(stateDir, identity), '');
}

/** The partial of `identity` is no fetch's any more (a stick's staging took it over, or it went). */
export async function forgetPeerPartial(stateDir: string, identity: string): Promise<void> {
  await rm(fileOf(stateDir, identity), { force: true });
}

async function peerPartials(stateDir: string): Promise<string[]> {
  const names = await readdir(dirOf(stateDir)).catch(() => [] as string[]);
  return names.filter((n) => IDENTITY_FILE.test(n)).map((n) => `sha256:${n}`);
}

/**
 * The daemon's look at the approvals: a fetch's partial whose approval is gone (`approved`: the
 * manifest digests approved now) is removed, under the load lock; a record whose partial is
 * gone is dropped. A load holding the lock leaves it to the next look.
 */
export async function removeWithdrawnPeerPartials(
  config: AgentConfig,
  approved: ReadonlySet<string>,
  log: Logger,
): Promise<void> {
  const { stateDir, upgradeDir } = config.paths;
  const withdrawn = (await peerPartials(stateDir)).filter((id) => !approved.has(id));
  if (!withdrawn.length) return;
  try {
    await withLoadLock(stateDir, async () => {
      for (const id of withdrawn) {
        const gone = await dropPartialsOf(upgradeDir, id);
        await forgetPeerPartial(stateDir, id);
        if (gone.length)
          log.info(
            'staging',
            `removed the partial fetch ${gone.join(', ')} of bundle ${id}: its approval was withdrawn`,
          );
      }
    });
  } catch (err) {
    if (failureOf(err, upgradeDir).reason !== 'Busy')
      log.warn('staging', `cannot remove the partial fetch of a withdrawn bundle: ${oneLine(err)}`);
  }
}
