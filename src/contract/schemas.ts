/**
 * The REST contract, written once (TypeBox): Fastify validates requests with it, the
 * OpenAPI document (docs/openapi.json) is generated from it, and the SDK's types mirror it.
 * Requests reject unknown fields; clients ignore unknown response fields.
 *
 * One module per concept in schemas/ (the modules build with schemas/build.ts); this index
 * re-exports them all and lists the named schemas the OpenAPI document references.
 */
import type { TSchema } from 'typebox';
import { ErrorBody } from './schemas/common.js';
import { ForkResult, Sandbox, SandboxNetwork } from './schemas/sandboxes.js';
import { ExecEvent, ExecResult } from './schemas/exec.js';
import { FileStat } from './schemas/files.js';
import { Image, ImageEvent } from './schemas/images.js';
import { Snapshot, SnapshotEvent } from './schemas/snapshots.js';
import { BranchResult, Lineage } from './schemas/branch.js';
import {
  CacheEntry,
  CacheInfo,
  CachePruneResult,
  PackResult,
  PushResult,
  UnpackResult,
} from './schemas/packs.js';
import { ChangeEvent } from './schemas/events.js';

export * from './schemas/common.js';
export * from './schemas/sandboxes.js';
export * from './schemas/exec.js';
export * from './schemas/files.js';
export * from './schemas/images.js';
export * from './schemas/snapshots.js';
export * from './schemas/branch.js';
export * from './schemas/host.js';
export * from './schemas/pty.js';
export * from './schemas/packs.js';
export * from './schemas/events.js';

/** Every named schema, registered with Fastify so the OpenAPI document references them. */
export const SHARED_SCHEMAS: TSchema[] = [
  ErrorBody,
  Sandbox,
  ExecResult,
  ExecEvent,
  FileStat,
  Image,
  ForkResult,
  Snapshot,
  SnapshotEvent,
  BranchResult,
  Lineage,
  SandboxNetwork,
  ImageEvent,
  PackResult,
  UnpackResult,
  PushResult,
  CacheEntry,
  CacheInfo,
  CachePruneResult,
  ChangeEvent,
];
