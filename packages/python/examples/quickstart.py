"""Boot a sandbox, run commands (buffered, then streamed as produced), move files.
Leaving the `with` block kills the sandbox."""

from forkd import Sandbox

with Sandbox.create(image="busybox", memory_mib=256) as sbx:
    result = sbx.commands.run(["uname", "-r"])  # buffered: one request, the whole result
    print(result.exit_code, result.stdout.strip())

    sbx.commands.run(
        "for i in 1 2 3; do echo line $i; sleep 0.2; done",
        on_stdout=lambda text: print("got", text, end=""),  # each line as it is printed
    )

    sbx.files.write("/tmp/hello.txt", "hello\n")
    print(sbx.files.read("/tmp/hello.txt"), end="")  # text; format="bytes" for bytes
    print([entry.name for entry in sbx.files.list("/tmp")])
    print(sbx.id, sbx.info.state)
