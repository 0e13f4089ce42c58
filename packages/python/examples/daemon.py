"""The daemon-wide calls: is it there, what it runs on, its images, the lineage."""

from forkd import Forkd

forkd = Forkd()  # or Forkd(url="https://forkd.internal:7070", token="…")
forkd.health()  # raises DaemonUnreachableError when no daemon answers
version = forkd.version()
print(version.version, version.qemu, version.accel)  # accel: "kvm" or "tcg"
print([image.name for image in forkd.images.list()])
print(len(forkd.lineage()), "images, snapshots and live sandboxes")
