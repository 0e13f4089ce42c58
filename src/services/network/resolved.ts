/**
 * The daemon's own answer to "where does this name go": the name proxy lets a connection
 * allowed by a hostname entry through only to an address the daemon resolved for that name
 * (Squid's `host_verify_strict`), never on the name the guest sent. Answers are asked of the
 * same upstream as the DNS proxy's and kept for their TTL (bounded), so a burst of
 * connections to one name costs one lookup.
 */
import { resolveA, type DnsEndpoint } from '../../drivers/net/dns.js';

/** Bounds on how long an answer is kept: a 0 TTL still spares a burst, none outlives 5 min. */
const MIN_TTL_S = 5;
const MAX_TTL_S = 300;
/** Names kept at once (a guest sending many names cannot grow the daemon). */
const MAX_NAMES = 1024;

interface Answer {
  ips: Promise<Set<string>>;
  until: number;
}

export class ResolvedNames {
  private readonly answers = new Map<string, Answer>();

  constructor(private readonly upstream: () => DnsEndpoint | undefined) {}

  /** The addresses `name` resolves to now (empty when it does not, or the lookup failed). */
  addresses(name: string): Promise<Set<string>> {
    const now = Date.now();
    const kept = this.answers.get(name);
    if (kept && kept.until > now) return kept.ips;
    if (this.answers.size >= MAX_NAMES) this.evict(now);
    const answer: Answer = { ips: this.lookup(name, now), until: now + MIN_TTL_S * 1000 };
    this.answers.set(name, answer);
    return answer.ips;
  }

  private async lookup(name: string, asked: number): Promise<Set<string>> {
    const upstream = this.upstream();
    if (!upstream) return new Set();
    try {
      const { ips, ttlS } = await resolveA(name, upstream);
      const kept = this.answers.get(name);
      const ttl = Math.min(MAX_TTL_S, Math.max(MIN_TTL_S, ttlS));
      if (kept) kept.until = asked + ttl * 1000;
      return new Set(ips);
    } catch {
      return new Set(); // kept MIN_TTL_S: a dead resolver is not asked per connection
    }
  }

  private evict(now: number): void {
    for (const [name, a] of this.answers) if (a.until <= now) this.answers.delete(name);
    if (this.answers.size >= MAX_NAMES) this.answers.clear();
  }
}
