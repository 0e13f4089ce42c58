// Lint config: typescript-eslint's recommended rules over host code, and the layer
// boundaries of docs/architecture.md as import rules, so they hold without a reviewer:
// contract ← drivers ← services ← api (routes see only the service interfaces).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

/** A client of the TypeScript SDK (the MCP server, the containerd shim) imports no host layer. */
function sdkClient(who) {
  return [
    {
      group: [
        '**/services/**',
        '**/drivers/**',
        '**/store/**',
        '**/api/**',
        '**/daemon/**',
        '**/cli/**',
      ],
      message: `${who} is a client of the TypeScript SDK: it reaches the daemon through it`,
    },
  ];
}

/** What each folder of src/ may not import, as no-restricted-imports patterns. */
const FORBIDDEN = {
  // schemas/ (a module per concept) reads rules.ts beside it, nothing else above.
  contract: [
    {
      group: ['../*', '!../rules.js', '../../*'],
      message: 'src/contract/ imports nothing of the layers above it',
    },
  ],
  api: [
    {
      group: ['**/services/**', '!**/services/contracts.js'],
      message: 'routes call the service interfaces (services/contracts.ts), never a service',
    },
    {
      group: ['**/drivers/**', '**/store/**'],
      message: 'routes reach drivers and the store only through services',
    },
  ],
  services: [
    {
      group: ['**/api/**', '**/daemon/**', '**/cli/**'],
      message: 'services never see HTTP or the CLI',
    },
  ],
  drivers: [
    {
      group: ['**/services/**', '**/store/**', '**/api/**', '**/daemon/**', '**/cli/**'],
      message: 'drivers talk to QEMU, the agent and the host; they know nothing above them',
    },
  ],
  // The store keeps rows; it knows nothing of the services that write them.
  store: [
    {
      group: ['**/services/**', '**/drivers/**', '**/api/**', '**/daemon/**', '**/cli/**'],
      message: 'src/store/ holds rows: it imports nothing of the layers that use it',
    },
  ],
  // The CLI is a client of the SDK; what it runs without a daemon comes from one module.
  cli: [
    {
      group: [
        '**/services/**',
        '!**/services/local.js',
        '**/drivers/**',
        '**/store/**',
        '**/api/**',
      ],
      message:
        'the CLI reaches the daemon through the SDK; what it runs on this host itself comes from services/local.ts',
    },
  ],
  mcp: sdkClient('the MCP server'),
  shim: sdkClient('the containerd shim'),
};

/** QMP is spoken inside drivers/qemu only: everyone else uses Vm's methods. */
const QMP_OUTSIDE_QEMU = {
  group: ['**/drivers/qemu/vm.js', './vm.js'],
  importNames: ['monitor'],
  message: 'QMP belongs to drivers/qemu: use a Vm method or a drivers/qemu function',
};

/**
 * The VMM seam (drivers/vmm.ts): services see `Vmm` through services/vmm.ts, never a QEMU
 * module; only the wiring (services/vmm-driver.ts) imports the driver's entry, and doctor
 * (host checks of QEMU's own binaries and settings) reads it directly.
 */
const QEMU_OUTSIDE_DRIVER = {
  group: ['**/drivers/qemu/**', '**/vmm-driver.js'],
  message: 'services reach the VMM through services/vmm.ts (the Vmm of drivers/vmm.ts)',
};
const QEMU_OUTSIDE_WIRING = {
  group: ['**/drivers/qemu/**'],
  message: 'only the wiring (services/vmm-driver.ts) imports the QEMU driver',
};

const restrict = (patterns) => ({
  rules: { 'no-restricted-imports': ['error', { patterns }] },
});

export default tseslint.config(
  { ignores: ['dist/', '**/dist/', 'node_modules/', 'agent/', 'packages/python/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { languageOptions: { globals: { ...globals.node } } },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  { files: ['src/**/*.ts', 'test/**/*.ts', 'bench/**/*.ts'], ...restrict([QMP_OUTSIDE_QEMU]) },
  { files: ['src/contract/**/*.ts'], ...restrict([...FORBIDDEN.contract, QMP_OUTSIDE_QEMU]) },
  { files: ['src/api/**/*.ts'], ...restrict([...FORBIDDEN.api, QMP_OUTSIDE_QEMU]) },
  {
    files: ['src/services/**/*.ts'],
    ...restrict([...FORBIDDEN.services, QEMU_OUTSIDE_DRIVER, QMP_OUTSIDE_QEMU]),
  },
  // The wiring: the one importer of the driver's entry, and the services' assembly.
  {
    files: [
      'src/services/vmm-driver.ts',
      'src/services/doctor.ts',
      'src/services/index.ts',
      'src/services/local.ts',
    ],
    ...restrict([...FORBIDDEN.services, QMP_OUTSIDE_QEMU]),
  },
  { files: ['src/daemon/**/*.ts'], ...restrict([QEMU_OUTSIDE_WIRING, QMP_OUTSIDE_QEMU]) },
  { files: ['src/store/**/*.ts'], ...restrict([...FORBIDDEN.store, QMP_OUTSIDE_QEMU]) },
  { files: ['src/cli/**/*.ts'], ...restrict([...FORBIDDEN.cli, QMP_OUTSIDE_QEMU]) },
  { files: ['src/drivers/**/*.ts'], ...restrict([...FORBIDDEN.drivers, QMP_OUTSIDE_QEMU]) },
  { files: ['src/drivers/qemu/**/*.ts'], ...restrict(FORBIDDEN.drivers) },
  { files: ['src/mcp/**/*.ts'], ...restrict([...FORBIDDEN.mcp, QMP_OUTSIDE_QEMU]) },
  { files: ['src/shim/**/*.ts'], ...restrict([...FORBIDDEN.shim, QMP_OUTSIDE_QEMU]) },
  // The web UI: browser ES modules served as they are (no build step).
  { files: ['ui/**/*.js'], languageOptions: { globals: { ...globals.browser } } },
);
