import { readSmallFile } from '@offline-bundle/host';

/**
 * The state files the agent keeps for itself (release and bundle records, pins, a pending
 * switch) are each far below this; one larger is not ours, and reading it whole would cost
 * its size in memory.
 */
const MAX_STATE_FILE_BYTES = 4 * 1024 * 1024;

/**
 * One of the agent's own JSON state files, or undefined when it is missing or unreadable (not a
 * regular file, too large, not JSON): each caller checks the shape it relies on and treats a
 * damaged file as absent, which at worst repeats work (a load, a pin) rather than stopping it.
 */
export async function readStateJson(path: string): Promise<unknown> {
  try {
    return JSON.parse((await readSmallFile(path, MAX_STATE_FILE_BYTES)).bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}
