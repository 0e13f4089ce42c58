/** The one version number shared by every forkd package (checked by test/version.test.ts). */
export const VERSION = '0.1.0';
