/**
 * From the runner's events to the REST shapes: the stream's lines as they come, or one
 * Execution (E2B's shape) gathered from them for a buffered answer.
 */
import type { EvalEventT, ExecutionT } from '../../contract/contexts.js';
import type { RunnerEvent } from '../../drivers/agent/runner.js';

/** The wire event of one runner event. */
export function toEvalEvent(ev: RunnerEvent): EvalEventT {
  if (ev.type === 'result') return { type: 'result', is_main_result: ev.main, data: ev.data };
  return ev;
}

/** Gathers events into an Execution; `finish` returns it once `end` was seen. */
export class ExecutionBuilder {
  private readonly execution: ExecutionT = {
    results: [],
    logs: { stdout: [], stderr: [] },
    error: null,
    text: null,
    execution_count: 0,
    duration_ms: 0,
  };

  add(ev: EvalEventT): void {
    const x = this.execution;
    if (ev.type === 'stdout' || ev.type === 'stderr') x.logs[ev.type].push(ev.text);
    else if (ev.type === 'result') {
      x.results.push({ is_main_result: ev.is_main_result, data: ev.data });
      const text = ev.data['text/plain'];
      if (ev.is_main_result && typeof text === 'string') x.text = text;
    } else if (ev.type === 'error') {
      x.error = { name: ev.name, value: ev.value, traceback: ev.traceback };
    } else if (ev.type === 'end') {
      x.execution_count = ev.execution_count;
      x.duration_ms = ev.duration_ms;
    }
  }

  finish(): ExecutionT {
    return this.execution;
  }
}
