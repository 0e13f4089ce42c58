/**
 * The layer boundaries hold without a reviewer: eslint.config.js forbids the imports that
 * run back up a floor or around a seam. Each case lints one wrong import as if it were a
 * file of that folder and expects the rule to fire; the last case is the tree itself.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ESLint } from 'eslint';
import { repoRoot } from '../../src/config.js';

const eslint = new ESLint({ cwd: repoRoot() });

async function violations(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? [])
    .filter((m) => m.ruleId === 'no-restricted-imports')
    .map((m) => m.message);
}

const WRONG: [string, string, string][] = [
  [
    'a route importing a service class',
    'src/api/routes/x.ts',
    "import { SnapshotManager } from '../../services/snapshots/service.js';\nvoid SnapshotManager;\n",
  ],
  [
    'a route importing a driver',
    'src/api/routes/x.ts',
    "import { Vm } from '../../drivers/qemu/vm.js';\nvoid Vm;\n",
  ],
  [
    'a service importing the API',
    'src/services/snapshots/x.ts',
    "import { errorBody } from '../../api/errors.js';\nvoid errorBody;\n",
  ],
  [
    'a driver importing a service',
    'src/drivers/qemu/x.ts',
    "import { locateGuest } from '../../services/guest.js';\nvoid locateGuest;\n",
  ],
  [
    'a driver importing the store',
    'src/drivers/agent/x.ts',
    "import { Store } from '../../store/db.js';\nvoid Store;\n",
  ],
  [
    'doctor (which may read the QEMU driver) speaking QMP',
    'src/services/doctor.ts',
    "import { monitor } from '../../drivers/qemu/vm.js';\nvoid monitor;\n",
  ],
  [
    'a service importing a QEMU module instead of the VMM seam',
    'src/services/sandboxes/x.ts',
    "import { Vm } from '../../drivers/qemu/vm.js';\nvoid Vm;\n",
  ],
  [
    "a service importing the QEMU driver's entry",
    'src/services/snapshots/x.ts',
    "import { qemu } from '../../drivers/qemu/index.js';\nvoid qemu;\n",
  ],
  [
    'a service importing the wiring of the VMM driver',
    'src/services/branch/x.ts',
    "import { wireVmm } from '../vmm-driver.js';\nvoid wireVmm;\n",
  ],
  [
    'the CLI importing a QEMU module',
    'src/cli/x.ts',
    "import { parseMerge } from '../drivers/qemu/tuning.js';\nvoid parseMerge;\n",
  ],
  [
    'the CLI importing a service other than services/local.ts',
    'src/cli/x.ts',
    "import { SandboxManager } from '../services/sandboxes/service.js';\nvoid SandboxManager;\n",
  ],
  [
    'the CLI importing the store',
    'src/cli/x.ts',
    "import { Store } from '../store/db.js';\nvoid Store;\n",
  ],
  [
    'the store importing a service',
    'src/store/x.ts',
    "import type { Services } from '../services/contracts.js';\nexport type T = Services;\n",
  ],
  [
    'the daemon importing a QEMU module',
    'src/daemon/x.ts',
    "import type { VmTuning } from '../drivers/qemu/tuning.js';\nexport type T = VmTuning;\n",
  ],
  [
    'the MCP server calling a service instead of the SDK',
    'src/mcp/x.ts',
    "import { buildServices } from '../services/index.js';\nvoid buildServices;\n",
  ],
  [
    'the containerd shim calling a service instead of the SDK',
    'src/shim/x.ts',
    "import { buildServices } from '../services/index.js';\nvoid buildServices;\n",
  ],
  [
    'the contract importing a layer above it',
    'src/contract/x.ts',
    "import { ForkdError } from '../errors.js';\nvoid ForkdError;\n",
  ],
  [
    "a concept's schemas importing a layer above the contract",
    'src/contract/schemas/x.ts',
    "import { ForkdError } from '../../errors.js';\nvoid ForkdError;\n",
  ],
];

for (const [what, file, code] of WRONG) {
  test(`lint refuses ${what}`, async () => {
    const found = await violations(file, code);
    assert.equal(found.length, 1, `expected one boundary error for ${file}, got ${found.length}`);
  });
}

test('lint allows what the layers may do', async () => {
  const ok: [string, string][] = [
    ['src/api/routes/x.ts', "import type { Services } from '../../services/contracts.js';\n"],
    ['src/services/x.ts', "import { vmm } from './vmm.js';\nvoid vmm;\n"],
    [
      'src/services/x.ts',
      "import type { VmHandle } from '../drivers/vmm.js';\nexport type T = VmHandle;\n",
    ],
    [
      'src/services/vmm-driver.ts',
      "import { qemu } from '../drivers/qemu/index.js';\nvoid qemu;\n",
    ],
    [
      'src/services/doctor.ts',
      "import { probeLive } from '../drivers/qemu/live.js';\nvoid probeLive;\n",
    ],
    ['src/cli/x.ts', "import { runDoctor } from '../services/local.js';\nvoid runDoctor;\n"],
    ['src/mcp/x.ts', "import { LIMITS } from '../contract/rules.js';\nvoid LIMITS;\n"],
    ['src/contract/schemas/x.ts', "import { LIMITS } from '../rules.js';\nvoid LIMITS;\n"],
    ['src/drivers/qemu/x.ts', "import { monitor } from './vm.js';\nvoid monitor;\n"],
    [
      'src/drivers/agent/x.ts',
      "import { SIGNALS } from '../../contract/rules.js';\nvoid SIGNALS;\n",
    ],
  ];
  for (const [file, code] of ok) assert.deepEqual(await violations(file, code), [], file);
});

test('the tree itself keeps every boundary', async () => {
  const results = await eslint.lintFiles(['src']);
  const broken = results.flatMap((r) =>
    r.messages
      .filter((m) => m.ruleId === 'no-restricted-imports')
      .map((m) => `${r.filePath}:${m.line}: ${m.message}`),
  );
  assert.deepEqual(broken, []);
});
