/**
 * The daemon's logger: pino JSON lines on stderr (stdout stays free for a supervisor that
 * wants it), the same format Fastify uses for request logs.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type LogLevel = LevelWithSilent;

export function createLogger(level: LogLevel = 'info'): Logger {
  return pino({ level, base: { pid: process.pid, name: 'forkd' } }, pino.destination(2));
}

/** Fastify's `logger` option for the same output. */
export function fastifyLoggerOptions(level: LogLevel = 'info') {
  return { level, stream: process.stderr };
}
