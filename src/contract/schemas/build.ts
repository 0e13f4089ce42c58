/**
 * What the schema modules build with and do not publish: requests reject unknown fields
 * (`strict`), rules.ts ranges as JSON-schema bounds (`between`).
 */
export const strict = { additionalProperties: false } as const;

/** A rules.ts range as JSON-schema bounds. */
export function between(range: { min: number; max: number }): { minimum: number; maximum: number } {
  return { minimum: range.min, maximum: range.max };
}
