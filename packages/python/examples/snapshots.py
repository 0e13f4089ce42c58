"""Snapshots: boot and warm a parent once, capture it, fork warm children from it, keep a
pool; branch a running child mid-task into a new snapshot that forks children of its
own; the lineage of it all; remove the chain at the end."""

from forkd import Forkd, Sandbox, Snapshot

snap = Snapshot.create(
    "warm",
    image="busybox",
    warm=["echo warmed > /data.txt"],  # run to completion, in order
    start=["i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 1; done"],  # kept running
    wait_for="test -s /tmp/count",
    on_progress=print,  # each step as the daemon reports it
)
try:
    print(snap.tag, snap.info.state, snap.info.physical_bytes)
    snap.set_pool(2)  # keep 2 VMMs pre-started: forks skip QEMU's start

    result = snap.fork(3)
    for failure in result.failed:  # a child that failed does not fail the others
        print(f"child {failure.index}: {failure.error.code} {failure.error}")
    for child in result.sandboxes:
        print(child.id, child.commands.run("cat /data.txt /tmp/count").stdout.split())

    # Branch a running child mid-task: it keeps running, the branch forks from that instant.
    child = result.sandboxes[0]
    child.files.write("/data.txt", "step-1\n")
    branch = child.branch(tag="step-1", fork=2)
    print(f"paused {branch.pause_ms} ms ({branch.mode}), {branch.captured_bytes} bytes")
    assert branch.snapshot.info.parent == "warm"
    for grandchild in branch.children.sandboxes if branch.children else []:
        assert grandchild.files.read("/data.txt") == "step-1\n"

    for node in Forkd().lineage(tag="warm"):  # a flat list with parent edges
        print(node.kind, node.id, "<-", node.parent.id if node.parent else None)

    one = Sandbox.create(snapshot="step-1")  # a fork of one
    one.kill()
finally:
    Snapshot.remove("warm", cascade=True, force=True)  # with step-1 and every sandbox of both
