"""Files both ways, streamed: a local file is uploaded as it is read and downloaded chunk
by chunk, so neither side holds it in memory whole."""

import hashlib
import os
import tempfile

from forkd import Sandbox

with tempfile.TemporaryDirectory() as tmp, Sandbox.create(image="busybox") as sbx:
    local = os.path.join(tmp, "data.bin")
    with open(local, "wb") as f:
        f.write(os.urandom(5 * 1024 * 1024))

    with open(local, "rb") as source:
        info = sbx.files.write("/data/data.bin", source, parents=True)  # streamed upload
    print(info.path, info.size)

    copy = os.path.join(tmp, "copy.bin")
    with sbx.files.read("/data/data.bin", format="stream") as chunks, open(copy, "wb") as out:
        for chunk in chunks:  # streamed download
            out.write(chunk)

    def digest(path: str) -> str:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    assert digest(local) == digest(copy)
    print(sbx.files.stat("/data/data.bin").size, sbx.files.exists("/data/nothing"))

    sbx.files.make_dir("/work/out")
    sbx.files.write("/work/out/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    print(sbx.commands.run("/work/out/run.sh").stdout, end="")  # ran
    sbx.files.remove("/work", recursive=True)
