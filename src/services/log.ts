/**
 * The logger services write background events to (a sandbox died, a restart re-adopted
 * three): the daemon passes its pino logger, which has this shape; tests pass nothing.
 */
export interface ServiceLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

const ignore = () => undefined;

export const silentLog: ServiceLog = { info: ignore, warn: ignore, error: ignore };
