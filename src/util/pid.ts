/**
 * Whether a process still runs, by pid: the check behind every sweep of what a dead
 * process left (a daemon's temp files and work dirs, a namespace's owner, a sandbox's).
 */

/** Whether a process of that pid exists (EPERM: it does, as another user). */
export function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
