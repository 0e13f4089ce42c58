/** Host routes: liveness (the one route without auth) and versions. */
import { VERSION } from '@forkd/sdk';
import type { Services } from '../../services/contracts.js';
import { BenchResults, DoctorReport, Health, Version } from '../../contract/schemas.js';
import type { Api } from '../types.js';
import { ERROR_RESPONSES } from './common.js';

const tags = ['host'];

export async function hostRoutes(app: Api, { services }: { services: Services }) {
  app.get(
    '/healthz',
    {
      config: { public: true },
      schema: {
        summary: 'Liveness: answers while the daemon serves requests (no auth)',
        tags,
        security: [],
        response: { 200: Health, ...ERROR_RESPONSES },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/version',
    {
      schema: {
        summary: 'forkd, API and QEMU versions, and the accelerator in use',
        tags,
        response: { 200: Version, ...ERROR_RESPONSES },
      },
    },
    async () => ({
      version: VERSION,
      api: 'v1' as const,
      qemu: await services.host.qemuVersion(),
      accel: await services.host.accel(),
    }),
  );
}

/** The host's reports for the web UI's pages (and any client): doctor and benchmarks. */
export async function reportRoutes(app: Api, { services }: { services: Services }) {
  app.get(
    '/v1/doctor',
    {
      schema: {
        summary: "The daemon host's prerequisites, as `forkd doctor` reports them",
        tags,
        response: { 200: DoctorReport, ...ERROR_RESPONSES },
      },
    },
    async () => (await services.host.doctor?.()) ?? { ok: true, checks: [] },
  );

  app.get(
    '/v1/bench',
    {
      schema: {
        summary: 'Benchmark outputs saved beside the daemon (bench/results), newest first',
        tags,
        response: { 200: BenchResults, ...ERROR_RESPONSES },
      },
    },
    async () => ({ results: (await services.host.benchResults?.()) ?? [] }),
  );
}
