/**
 * The one version number shared by every forkd package (checked by test/version.test.ts).
 *
 * @example
 * import { VERSION } from '@forkd/sdk'; console.log(VERSION);
 */
export const VERSION = '0.1.0';
