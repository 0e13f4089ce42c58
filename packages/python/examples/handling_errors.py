"""Errors: every failure is a ForkdError with a stable code, one class per code of the
catalog; the daemon's capacity errors say when to retry; a missing daemon fails at once."""

import time

import forkd
from forkd import Sandbox

try:
    Sandbox.connect("sbx-000000000000")
except forkd.SandboxNotFoundError as e:
    print(e.code, e.status, e)  # sandbox_not_found 404 no sandbox sbx-000000000000: …

try:
    Sandbox.create(memory_mib=1)
except forkd.BadRequestError as e:
    print(e.details)  # {'field': 'body.memory_mib', 'reason': 'must be >= 64'}


def create_when_there_is_room() -> Sandbox:
    while True:
        try:
            return Sandbox.create(image="busybox")
        except forkd.CapacityError as e:  # too many boots at once: the daemon says how long
            time.sleep(e.retry_after or 1.0)


with create_when_there_is_room() as sbx:
    try:
        sbx.files.read("/no/such/file")
    except forkd.GuestFileNotFoundError as e:
        print(e.code)  # guest_file_not_found
    try:
        sbx.commands.run(["no-such-command"])
    except forkd.ForkdError as e:  # the base class of them all
        print(e.code)  # command_not_found

try:
    Sandbox.list(url="unix:/nowhere/forkd.sock")
except forkd.DaemonUnreachableError as e:  # also a ConnectionError
    print(e)  # … could not be reached (…): start it with `forkd daemon`, or set FORKD_URL …
