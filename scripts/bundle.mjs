#!/usr/bin/env node
// Bundles what a short CLI call loads, over tsc's output, so that `forkd VERB` reads a few
// files instead of ~50 modules, and loads only the node built-ins it uses (module loading
// was most of what a client verb cost):
//  - the SDK's entry, packages/sdk/dist/index.js, from its sources into one file (one copy:
//    the CLI, the daemon and SDK users all import this file; wire.js (with bodies.js) and version.js import
//    nothing and stay as tsc wrote them);
//  - the CLI's client side into dist/src/cli/main.js: commander and the client verbs (the
//    few built-ins only one verb needs, like child_process for `cp -r`, are imported where
//    they are used). Everything of the host (daemon, services, drivers, store, config) and
//    every other package, the SDK included, stays outside as the separate modules tsc
//    wrote, loaded only by the verbs that need them, through the same relative imports:
//    the bundle sits where main.js was, so those paths resolve as before.
import { build } from 'esbuild';
import { dirname, relative, resolve } from 'node:path';

const CLI = resolve('dist/src/cli');
/** Verb modules that run host code themselves: kept as their own files. */
const HOST_VERBS = new Set(
  ['daemon.js', 'doctor.js', 'setup.js', 'image.js'].map((f) => resolve(CLI, f)),
);

/** Packages bundled in; every other one stays a normal import (one copy of the SDK). */
const BUNDLED = new Set(['commander']);

/**
 * Commander requires node:child_process at load, for executable subcommands forkd does not
 * have: it gets a stand-in that loads the real module only if it is ever used.
 */
const LAZY_CHILD_PROCESS = `let real;
module.exports = new Proxy({}, { get: (_, k) => (real ??= require('node:child_process'))[k] });`;

/**
 * Marks external: packages but commander, host code (anything under dist/src outside cli/)
 * and the host verbs.
 */
const hostExternal = {
  name: 'host-external',
  setup(b) {
    b.onResolve({ filter: /^node:child_process$/ }, (args) =>
      args.importer.includes('/node_modules/commander/')
        ? { path: 'lazy-child-process', namespace: 'forkd' }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'forkd' }, () => ({
      contents: LAZY_CHILD_PROCESS,
      loader: 'js',
    }));
    // The SDK by its file, not its package name: resolving a package's `exports` costs a
    // short call ms. node_modules/@forkd/sdk is the workspace link in a clone and the
    // bundled copy in an installed forkd, so the path holds in both; node resolves it to the
    // same real file host code imports, so there is still one copy.
    b.onResolve({ filter: /^@forkd\/sdk(\/\w+)?$/ }, (args) => {
      const entry = args.path.split('/')[2] ?? 'index';
      return { path: `../../../node_modules/@forkd/sdk/dist/${entry}.js`, external: true };
    });
    b.onResolve({ filter: /^[^./]/ }, (args) => {
      const name = args.path
        .split('/')
        .slice(0, args.path.startsWith('@') ? 2 : 1)
        .join('/');
      return BUNDLED.has(name) ? undefined : { path: args.path, external: true };
    });
    b.onResolve({ filter: /^\.\.?\// }, (args) => {
      const target = resolve(dirname(args.importer), args.path);
      const outside = !target.startsWith(CLI + '/') && target.startsWith(resolve('dist/src'));
      if (!outside && !HOST_VERBS.has(target)) return undefined;
      return { path: './' + relative(CLI, target), external: true };
    });
  },
};

await build({
  entryPoints: [resolve(CLI, 'main.js')],
  outfile: resolve(CLI, 'main.js'),
  allowOverwrite: true,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  plugins: [hostExternal],
  // commander is CommonJS: its require() of node builtins needs a real require.
  banner: {
    js: "import { createRequire as __forkdRequire } from 'node:module';\nconst require = __forkdRequire(import.meta.url);",
  },
  // Less source to parse at every start (names are kept: stack traces stay readable, and
  // esbuild reads tsc's source maps, so they still point into src/cli/*.ts).
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: true,
  logLevel: 'warning',
});

await build({
  entryPoints: [resolve('packages/sdk/src/index.ts')],
  outfile: resolve('packages/sdk/dist/index.js'),
  allowOverwrite: true,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node18',
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: true,
  logLevel: 'warning',
});
