"""The SDK's dataclasses mirror the REST contract: every field of each one is a property of
its schema in docs/openapi.json (generated from the daemon's TypeBox schemas), and every
property of the schema is a field, so a renamed or new field fails here instead of being
silently dropped. Unknown fields in answers are ignored, missing optional ones defaulted."""

from __future__ import annotations

import dataclasses
import json
import os
import unittest
from typing import Any, Dict, Set

import support  # noqa: F401 (puts the package on sys.path)

import forkd
from forkd._types import from_wire

with open(os.path.join(support.REPO, "docs", "openapi.json"), encoding="utf-8") as f:
    OPENAPI: Dict[str, Any] = json.load(f)
SCHEMAS = OPENAPI["components"]["schemas"]


def answer(path: str, method: str) -> Any:
    """The 2xx JSON schema of a route."""
    responses = OPENAPI["paths"][path][method]["responses"]
    ok = next(v for k, v in responses.items() if k.startswith("2"))
    return ok["content"]["application/json"]["schema"]


def props(schema: Any) -> Set[str]:
    for option in schema.get("anyOf", []):
        if "properties" in option:
            return props(option)
    return set(schema["properties"])


def fields(cls: type) -> Set[str]:
    return {f.name for f in dataclasses.fields(cls)}


class WireTest(unittest.TestCase):
    def test_every_type_has_exactly_its_schemas_fields(self) -> None:
        lineage_node = SCHEMAS["Lineage"]["properties"]["nodes"]["items"]
        verify = answer("/v1/snapshots/{tag}/verify", "post")
        pairs = {
            forkd.SandboxInfo: SCHEMAS["Sandbox"],
            forkd.CommandResult: SCHEMAS["ExecResult"],
            forkd.EntryInfo: SCHEMAS["FileStat"],
            forkd.ImageInfo: SCHEMAS["Image"],
            forkd.SnapshotInfo: SCHEMAS["Snapshot"],
            forkd.SnapshotFileInfo: SCHEMAS["Snapshot"]["properties"]["files"]["items"],
            forkd.PoolInfo: answer("/v1/snapshots/{tag}/pool", "put"),
            forkd.PoolBudgetInfo: answer("/v1/snapshots/{tag}/pool", "put")["properties"]["budget"],
            forkd.LineageNode: lineage_node,
            forkd.LineageEdge: lineage_node["properties"]["parent"],
            forkd.VerifyReport: verify,
            forkd.VerifyProblem: verify["properties"]["problems"]["items"],
            forkd.VersionInfo: answer("/version", "get"),
            forkd.BranchResult: SCHEMAS["BranchResult"],
            forkd.ForkResult: SCHEMAS["ForkResult"],
            forkd.ForkFailure: SCHEMAS["ForkResult"]["properties"]["failed"]["items"],
            forkd.ContextInfo: answer("/v1/sandboxes/{id}/contexts", "post"),
            forkd.PtySessionInfo: SCHEMAS["PtySession"],
            forkd.PackInfo: SCHEMAS["PackResult"],
            forkd.InstallInfo: SCHEMAS["UnpackResult"],
            forkd.PushInfo: SCHEMAS["PushResult"],
        }
        for cls, schema in pairs.items():
            self.assertEqual(fields(cls), props(schema), cls.__name__)
        self.assertEqual(fields(forkd.WriteInfo) - {"path"}, props(answer("/v1/sandboxes/{id}/files", "put")))

    def test_create_and_fork_send_the_network_and_limits_fields(self) -> None:
        create = SCHEMAS.get("CreateSandbox") or OPENAPI["paths"]["/v1/sandboxes"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        self.assertLessEqual({"network", "egress", "limits"}, props(create))
        self.assertEqual(
            forkd._sandbox.limits_body({"memory": 512 * 1024 * 1024, "cpu": 0.5}),
            {"memory": "536870912", "cpu": 0.5},
        )

    def test_unknown_fields_are_dropped_and_old_daemons_defaulted(self) -> None:
        wire = {
            "tag": "warm", "state": "ready", "bootable": True, "image": "busybox", "parent": None,
            "source_sandbox": None, "memory_mib": 256, "cpus": 1, "labels": {}, "created_at": "t",
            "kernel": "k", "qemu": "q", "logical_bytes": 1, "physical_bytes": 1, "children_alive": 0,
            "pool": {"size": 0, "ready": 0}, "files": [{"name": "memory", "size": 1, "allocated": 1, "sha256": "s"}],
            "brand_new": 1,
        }
        info = from_wire(forkd.SnapshotInfo, wire)
        self.assertEqual((info.depth, info.ancestors, info.dependents, info.pool.prewarm), (0, [], [], False))
        self.assertEqual(info.files[0].name, "memory")
        self.assertFalse(hasattr(info, "brand_new"))


if __name__ == "__main__":
    unittest.main()
