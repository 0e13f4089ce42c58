/** Small statistics helpers the benchmarks share (percentiles over samples). */

/** Time `call` n times, one after another, in ms. */
export async function timeSequential(n: number, call: () => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call();
    samples.push(performance.now() - t0);
  }
  return samples;
}

/** The p-th percentile (0–100) of samples, nearest-rank. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

/** "p50 12.3 ms, p90 15.0 ms, min …, max …" for a sample list. */
export function summary(samples: number[], unit = 'ms'): string {
  const f = (n: number) => `${n.toFixed(1)} ${unit}`;
  return `p50 ${f(percentile(samples, 50))}, p90 ${f(percentile(samples, 90))}, min ${f(Math.min(...samples))}, max ${f(Math.max(...samples))} (n=${samples.length})`;
}
