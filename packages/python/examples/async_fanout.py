"""asyncio: the same calls, awaited. Fork five warm sandboxes, drive them at once, stream
their output to a coroutine on the event loop, gather the results; `async with` kills
each one."""

import asyncio

from forkd import AsyncSandbox, AsyncSnapshot


async def job(sbx: AsyncSandbox, n: int) -> str:
    async def on_stdout(text: str) -> None:  # runs on this loop; output waits for it
        print(f"[{n}] {text}", end="")

    async with sbx:
        await sbx.files.write("/tmp/n", str(n))
        result = await sbx.commands.run(
            "for i in 1 2; do echo step $i of $(cat /tmp/n); sleep 0.2; done", on_stdout=on_stdout
        )
        return result.stdout


async def main() -> None:
    snap = await AsyncSnapshot.create("fanout", image="busybox")
    try:
        forked = await snap.fork(5)  # one request; each child an AsyncSandbox
        outputs = await asyncio.gather(*(job(s, n) for n, s in enumerate(forked.sandboxes)))
        print(len(outputs), "done")
    finally:
        await AsyncSnapshot.remove("fanout", force=True)


asyncio.run(main())
