/**
 * The REST contract, a sandbox's files: paths, stats, directory listings, the guest user.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { strict } from './build.js';
import { USER_PATTERN } from '../rules.js';
import { GuestPath } from './common.js';

/** Whom a file or directory written belongs to in the guest. */
const OwnerUser = Type.Optional(
  Type.String({
    pattern: USER_PATTERN,
    description:
      "guest user it (and the directories it creates) belongs to (default: the sandbox's default user, else root)",
  }),
);

export const PathQuery = Type.Object({ path: GuestPath }, strict);
export const PutFileQuery = Type.Object(
  {
    path: GuestPath,
    mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777 })),
    parents: Type.Optional(Type.Boolean()),
    user: OwnerUser,
  },
  strict,
);
export const RemoveQuery = Type.Object(
  { path: GuestPath, recursive: Type.Optional(Type.Boolean()) },
  strict,
);
export const Mkdir = Type.Object(
  {
    path: GuestPath,
    parents: Type.Optional(Type.Boolean()),
    mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777 })),
    user: OwnerUser,
  },
  strict,
);
export const FileStat = Type.Object(
  {
    name: Type.String(),
    kind: Type.Union([
      Type.Literal('file'),
      Type.Literal('dir'),
      Type.Literal('symlink'),
      Type.Literal('other'),
    ]),
    size: Type.Integer(),
    mode: Type.Integer(),
    mtime_ms: Type.Number(),
    owner: Type.Optional(Type.String({ description: 'owning user (name, else uid)' })),
    group: Type.Optional(Type.String({ description: 'owning group (name, else gid)' })),
    target: Type.Optional(
      Type.String({ description: "a symlink's target, as written (not resolved)" }),
    ),
    xattrs: Type.Optional(
      Type.Record(Type.String(), Type.String(), {
        description: "a file's or directory's user.* extended attributes, when it has any",
      }),
    ),
  },
  { $id: 'FileStat' },
);
export type FileStatT = Static<typeof FileStat>;
/** Who a call acts as in a guest: a user, its home, where its commands start by default. */
export const GuestUser = Type.Object({
  name: Type.String(),
  uid: Type.Integer(),
  gid: Type.Integer(),
  home: Type.String(),
  cwd: Type.String(),
});
export type GuestUserT = Static<typeof GuestUser>;
export const FileList = Type.Object({ entries: Type.Array(FileStat) });
export const WriteResult = Type.Object({ size: Type.Integer() });
