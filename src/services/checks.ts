/**
 * The contract's rules (src/contract/rules.ts) as checks that throw catalog errors, for
 * callers that do not come through the REST schemas: `forkd run`, the CLI's local verbs,
 * in-process services. The messages name the field and what is allowed.
 */
import { inRange, NAME_RULE, NAME_RULE_TEXT, type IntRange } from '../contract/rules.js';
import { ForkdError } from '../errors.js';

/** `bad_request` unless `value` is an integer in `range`. */
export function checkRange(field: string, value: number, range: IntRange): void {
  if (inRange(value, range)) return;
  throw new ForkdError(
    'bad_request',
    `${field} must be an integer from ${range.min} to ${range.max}`,
    { field, value },
  );
}

/** `bad_request` unless `name` follows the name rule (image names, snapshot tags). */
export function checkName(kind: 'image name' | 'snapshot tag', name: string): void {
  if (typeof name === 'string' && NAME_RULE.test(name)) return;
  const shown = typeof name === 'string' ? name.slice(0, 80) : String(name);
  throw new ForkdError(
    'bad_request',
    `invalid ${kind} ${JSON.stringify(shown)}: use ${NAME_RULE_TEXT}`,
    kind === 'snapshot tag' ? { field: 'tag' } : { name, rule: NAME_RULE.source },
  );
}
