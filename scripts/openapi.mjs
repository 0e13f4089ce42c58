#!/usr/bin/env node
// Writes docs/openapi.json from the route schemas of the compiled app (run after the build:
// `npm run build && npm run openapi`). With --check it writes nothing and exits 1 when the
// checked-in file differs from what the app generates (test/api/openapi.test.ts does too).
import { readFileSync, writeFileSync } from 'node:fs';
import { buildApp } from '../dist/src/api/app.js';
import { renderOpenApi } from '../dist/src/api/openapi.js';

const FILE = 'docs/openapi.json';

// Generating the document builds the routes but never calls a service.
const unwired = new Proxy(
  {},
  {
    get: () => () => {
      throw new Error('services are not wired when generating the OpenAPI document');
    },
  },
);
const services = { sandboxes: unwired, images: unwired, audit: unwired, host: unwired };

const app = await buildApp(services, { requireAuth: false });
const text = await renderOpenApi(app);
await app.close();

if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(FILE, 'utf8');
  } catch {
    // missing counts as drift
  }
  if (current !== text) {
    console.error(`${FILE} is out of date: run \`npm run build && npm run openapi\``);
    process.exit(1);
  }
  console.log(`${FILE} is up to date`);
} else {
  writeFileSync(FILE, text);
  console.log(`wrote ${FILE}`);
}
