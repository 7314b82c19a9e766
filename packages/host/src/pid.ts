/**
 * Whether a process with this pid exists. EPERM means it does, owned by another user: the
 * lock and liveness checks (agent load lock, blob cache lock, status writer, stale temp
 * files) must not take another user's live process for a dead one.
 */
export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
