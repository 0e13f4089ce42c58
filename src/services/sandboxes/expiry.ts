/**
 * One timer per sandbox with a timeout: when its expires_at passes, the sandbox is stopped
 * (reason `timeout`). The database holds expires_at, so a restarted daemon re-arms from it.
 */

/** setTimeout's ceiling (~24.8 days); a later deadline is reached in hops. */
const MAX_DELAY_MS = 2 ** 31 - 1;

export class ExpiryTimers {
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(private readonly onExpire: (id: string) => void) {}

  /** (Re-)arm `id` for `expiresAt` (ISO time); null disarms. Past deadlines fire at once. */
  arm(id: string, expiresAt: string | null): void {
    this.clear(id);
    if (expiresAt === null) return;
    const deadline = Date.parse(expiresAt);
    const delay = Math.max(0, deadline - Date.now());
    const timer = setTimeout(
      () => {
        this.timers.delete(id);
        if (Date.now() >= deadline) this.onExpire(id);
        else this.arm(id, expiresAt);
      },
      Math.min(delay, MAX_DELAY_MS),
    );
    // The daemon's server keeps the process alive; a lone timer must not.
    timer.unref();
    this.timers.set(id, timer);
  }

  clear(id: string): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }

  clearAll(): void {
    for (const id of [...this.timers.keys()]) this.clear(id);
  }
}
