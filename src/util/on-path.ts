/**
 * Where a command name runs from: the first executable of that name on a PATH, searched as
 * exec does (a name with a slash is taken as it is). Used to name the binary a cached
 * result depends on, and by the doctor's checks to say whether a tool is installed.
 */
import { constants } from 'node:fs';
import { access } from 'node:fs/promises';
import { delimiter, join } from 'node:path';

export async function onPath(
  cmd: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string | undefined> {
  if (cmd.includes('/')) return cmd;
  for (const dir of (env.PATH ?? '').split(delimiter).filter(Boolean)) {
    const file = join(dir, cmd);
    const runnable = await access(file, constants.X_OK).then(
      () => true,
      () => false,
    );
    if (runnable) return file;
  }
  return undefined;
}
