"""Commands: exit codes, stdin, environment, timeouts, raw output, and a command in the
background with a handle to write its stdin, signal it and wait for it."""

from forkd import Sandbox

with Sandbox.create(image="busybox", envs={"GREETING": "hi"}) as sbx:
    r = sbx.commands.run("echo $GREETING $NAME from $PWD; exit 3", envs={"NAME": "x"}, cwd="/tmp")
    assert (r.exit_code, r.stdout) == (3, "hi x from /tmp\n")  # a non-zero exit is no exception

    assert sbx.commands.run("tr a-z A-Z", stdin="shout\n").stdout == "SHOUT\n"

    slow = sbx.commands.run("sleep 60", timeout=0.5)  # seconds
    assert slow.timed_out and slow.signal == "SIGKILL"

    chunks = []
    sbx.commands.run(r"printf '\000\001\002'", on_output=lambda stream, data: chunks.append(data))
    assert b"".join(chunks) == b"\x00\x01\x02"  # raw bytes, binary-safe

    def echo(text: str) -> None:  # called from the handle's own thread as output comes
        print("cat says", text, end="")

    cat = sbx.commands.run("cat", background=True, keep_stdin_open=True, on_stdout=echo)
    cat.send_stdin("typed into stdin\n")
    cat.close_stdin()
    print(cat.wait().exit_code)  # 0

    server = sbx.commands.run("sleep 600", background=True)
    server.kill("SIGTERM")
    print(server.wait().signal)  # SIGTERM
