"""``vaultmem mcp`` over stdio when the client or the operator does what
clients and operators do: stops reading, closes its end of the pipe, presses
Ctrl-C during a burst of writes, feeds the server a file or ``/dev/null``,
starts it with an actor git cannot record, or erases a file while the server
runs.  Every server here is a real ``python -m vaultmem mcp`` process spoken
to line by line; the vault is checked after with ``vaultmem verify`` and
``git fsck --strict``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ACTOR, HttpServer, Served, commits, git_out, stdio

TIMEOUT = 60.0  # seconds: a bound on the server answering or exiting, never an expectation of speed
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served.make(tmp_path / "mcp")


def request(ident: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(ident: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return request(ident, "tools/call", {"name": name, "arguments": arguments})


def opening() -> list[dict[str, Any]]:
    return [request(0, "initialize", HELLO), {"jsonrpc": "2.0", "method": "notifications/initialized"}]


def lines(messages: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(m) + "\n" for m in messages).encode()


class Raw:
    """``vaultmem mcp`` as a child process with pipes on all three streams."""

    def __init__(self, served: Served, *options: str) -> None:
        self.process = subprocess.Popen(
            served.command(*options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=served.env(),
            cwd=str(served.home),
        )

    def send(self, *messages: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(lines(list(messages)))
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any] | None:
        """The next message on standard output; None at its end."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        assert ready, "the server did not answer"
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def finish(self) -> tuple[int, str]:
        """Wait for the server to exit: its exit code and standard error."""
        try:
            code = self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the server did not exit") from None
        assert self.process.stderr is not None
        return code, self.process.stderr.read().decode("utf-8", "replace")


def written(served: Served) -> dict[str, str]:
    """Every memory file and its text, read back through a fresh vault."""
    with served.open() as vault:
        names = git_out(served.path, "ls-tree", "-r", "-z", "--name-only", "refs/heads/main").split("\0")
        return {"/" + name: vault.read("/" + name) for name in names if name}


def assert_consistent(served: Served) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(served.path), "verify"],
        env=served.env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    fsck = subprocess.run(["git", "-C", str(served.path), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def run_piped(
    served: Served, data: bytes | None, stdin: Any = None, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    """The server run to its end on ``data`` (or ``stdin``) as its standard input."""
    return subprocess.run(
        served.command(*options),
        input=data,
        stdin=stdin,
        capture_output=True,
        env=served.env(),
        cwd=str(served.home),
        timeout=TIMEOUT,
        check=False,
    )


def answers(stdout: bytes) -> dict[object, dict[str, Any]]:
    found = [json.loads(line) for line in stdout.decode().splitlines()]
    return {message["id"]: message for message in found}


# -- the client goes away ----------------------------------------------------------------------


def test_a_client_that_stops_reading_leaves_its_writes_and_a_quiet_exit(served: Served) -> None:
    """A client killed mid-conversation closes both pipes: the server's
    answers have nowhere to go.  It reads no more and exits 0 without a word
    (no "unexpected error, report it"); each write it made is kept whole,
    and the vault is sound."""
    raw = Raw(served)
    raw.send(*opening())
    assert raw.answer() is not None
    texts = {f"/memories/gone/{n}.txt": f"note {n}\n" * 2000 for n in range(20)}
    raw.send(*(call(n + 1, "create", {"path": p, "file_text": t}) for n, (p, t) in enumerate(texts.items())))
    assert raw.process.stdout is not None and raw.process.stdin is not None
    raw.process.stdout.close()  # the client is gone: nobody reads the answers
    time.sleep(0.2)  # lets the server try to answer into the closed pipe
    raw.process.stdin.close()
    code, errors = raw.finish()
    assert code == 0, errors
    assert errors == ""
    kept = written(served)
    assert kept and kept.items() <= texts.items()  # the first at least, each one whole
    assert_consistent(served)


def test_stdin_closed_after_the_requests_still_gets_every_answer(served: Served) -> None:
    """``vaultmem mcp < requests`` (or a client that sends its last call and
    closes its end): every request read is answered before the server
    exits, the last one too, and each answered write is in the vault."""
    messages = [
        *opening(),
        *(call(n, "create", {"path": f"/memories/piped/{n}.txt", "file_text": f"{n}\n"}) for n in range(1, 6)),
        call(6, "view", {"path": "/memories/piped"}),
    ]
    done = run_piped(served, lines(messages))
    assert done.returncode == 0, done.stderr
    got = answers(done.stdout)
    assert sorted(got, key=str) == [0, 1, 2, 3, 4, 5, 6]
    for n in range(1, 6):
        assert got[n]["result"]["content"][0]["text"] == f"File created successfully at: /memories/piped/{n}.txt"
    assert got[6]["result"]["content"][0]["text"].endswith("\n2B\t/memories/piped/5.txt")
    assert written(served) == {f"/memories/piped/{n}.txt": f"{n}\n" for n in range(1, 6)}


def test_a_write_sent_just_before_stdin_closes_is_answered(served: Served) -> None:
    raw = Raw(served)
    raw.send(*opening())
    assert raw.answer() is not None
    raw.send(call(1, "create", {"path": "/memories/last.txt", "file_text": "x" * 100_000}))
    assert raw.process.stdin is not None
    raw.process.stdin.close()
    answer = raw.answer()
    assert answer is not None and answer["id"] == 1
    assert answer["result"]["content"][0]["text"] == "File created successfully at: /memories/last.txt"
    assert raw.answer() is None
    code, errors = raw.finish()
    assert (code, errors) == (0, "")
    assert written(served) == {"/memories/last.txt": "x" * 100_000}


@pytest.mark.parametrize("source", ["file", "null"])
def test_standard_input_may_be_a_file_or_dev_null(served: Served, tmp_path: Path, source: str) -> None:
    """Not every standard input is a pipe: ``vaultmem mcp < requests.jsonl``
    answers each request, and ``< /dev/null`` (no client) exits at once."""
    messages = [*opening(), call(1, "create", {"path": "/memories/from-file.txt", "file_text": "hi\n"})]
    given = tmp_path / "requests.jsonl"
    given.write_bytes(lines(messages) if source == "file" else b"")
    with open(given if source == "file" else os.devnull, "rb") as stdin:
        done = run_piped(served, None, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    if source == "file":
        got = answers(done.stdout)
        assert got[1]["result"]["content"][0]["text"] == "File created successfully at: /memories/from-file.txt"
    else:
        assert done.stdout == b""


# -- the operator stops it -----------------------------------------------------------------------


def test_ctrl_c_during_a_burst_of_writes_answers_every_write_it_made(served: Served) -> None:
    """Ctrl-C (SIGINT) while a client sends writes: the server reads no more,
    answers every request it read, and exits 130 without a traceback or an
    "unexpected error" line.  What it answered is exactly what it wrote."""
    raw = Raw(served)
    raw.send(*opening())
    assert raw.answer() is not None
    total = 300
    raw.send(*(call(n, "create", {"path": f"/memories/burst/{n}.txt", "file_text": f"{n}\n"}) for n in range(1, total)))
    first = raw.answer()
    assert first is not None and first["id"] == 1
    raw.process.send_signal(signal.SIGINT)
    answered = {1}
    while (message := raw.answer()) is not None:
        assert "result" in message, message
        assert message["result"]["isError"] is False, message
        answered.add(message["id"])
    code, errors = raw.finish()
    assert code == 130, errors
    assert "unexpected" not in errors and "Traceback" not in errors, errors
    assert set(written(served)) == {f"/memories/burst/{n}.txt" for n in answered}
    assert_consistent(served)


# -- how it is started ----------------------------------------------------------------------------


@pytest.mark.parametrize("actor", ["", "   ", "ops\nVaultmem-Session: forged", "<script>", "a" * 201])
def test_an_actor_git_cannot_record_is_refused_before_serving(served: Served, actor: str) -> None:
    """``--actor`` names the author of every version: one git cannot record
    is refused when the server starts, in one line to the operator, instead
    of a server that refuses every write the model makes."""
    done = subprocess.run(
        served.command("--actor", actor),
        input=lines([*opening(), call(1, "create", {"path": "/memories/a.txt", "file_text": "x"})]),
        capture_output=True,
        env=served.env(),
        cwd=str(served.home),
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    message = done.stderr.decode()
    assert message.startswith("vaultmem: the actor ") and message.count("\n") == 1, message
    assert commits(served.path) == []


# -- another process erases while the server runs ----------------------------------------------


def test_history_stops_naming_a_file_erased_by_another_process(tmp_path: Path) -> None:
    """In a vault with sealed names, erasing every version of a file erases
    its name (docs/erasure.md).  A server that listed the history before
    the erasure must not keep showing the name after it."""
    from vaultmem import Vault, generate_key

    hidden = (str(tmp_path), str(tmp_path.resolve()))  # host paths no result may show
    folder = tmp_path / "sealed"
    folder.mkdir()
    (folder / "home").mkdir()
    key = generate_key()
    Vault.init(folder / "memory.vault", key=key, sealed_names=True).close()
    served = Served(path=folder / "memory.vault", key=key, home=folder / "home", forbidden=hidden)
    with stdio(served, "--actor", ACTOR) as session:
        assert not session.call("create", {"path": "/memories/customers/ada.md", "file_text": "e-mail\n"}).is_error
        assert not session.call("create", {"path": "/memories/customers/grace.md", "file_text": "Fridays\n"}).is_error
        assert "ada.md" in session.call("history", {}).text
        forget = ["forget", "/memories/customers/ada.md", "--reason", "GDPR request 4411", "--actor", "ops"]
        erased = subprocess.run(
            [*served.command()[:3], "--vault", str(served.path), *forget],
            env=served.env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert erased.returncode == 0, erased.stderr
        shown = session.call("history", {}).text
    assert "ada" not in shown, shown
    assert "grace.md" in shown


# -- what the tools say about themselves ---------------------------------------------------------


def test_str_replace_is_marked_destructive_as_it_can_remove_text(served: Served) -> None:
    """MCP's ``destructiveHint`` false means "only additive updates": a client
    may run such a tool without asking.  ``str_replace`` replaces text (with
    an empty ``new_str`` it removes it), so it is marked destructive, as
    ``delete`` and ``rename`` are; ``create`` and ``insert`` only add."""
    with stdio(served) as session:
        hints = {tool.name: tool.annotations for tool in session.tools()}
    destructive = {name for name, hint in hints.items() if hint is not None and hint.destructive_hint}
    assert destructive == {"str_replace", "delete", "rename"}


def test_a_prompt_the_server_does_not_have_is_refused_without_a_logged_traceback(served: Served) -> None:
    """The server offers no prompts or resources: a client asking for one by
    name gets an error, and the server's log (which an operator reads, and a
    client such as Claude Desktop keeps) gets no traceback for it."""
    raw = Raw(served)
    raw.send(*opening())
    assert raw.answer() is not None
    raw.send(request(1, "prompts/get", {"name": "summarize", "arguments": {"topic": "x"}}))
    refused = raw.answer()
    assert refused is not None and refused["id"] == 1 and "error" in refused
    assert "summarize" in refused["error"]["message"]
    raw.send(call(2, "view", {"path": "/memories"}))
    assert raw.answer() is not None
    assert raw.process.stdin is not None
    raw.process.stdin.close()
    code, errors = raw.finish()
    assert code == 0
    assert "Traceback" not in errors and "ERROR" not in errors, errors[:2000]


# -- the host's storage fails ------------------------------------------------------------------


def test_a_write_the_hosts_storage_refuses_is_logged_for_the_operator(served: Served) -> None:
    """A file the host will not let grow (here ``ulimit -f``, as a full disk
    would) refuses the write: the client is told, without a host path, to
    ask the operator, and the operator finds the cause in the server's log."""
    import base64

    script = 'ulimit -f 16 && exec "$@"'  # 16 blocks: the vault opens, a 90 KiB object cannot be written
    process = subprocess.Popen(
        ["bash", "-c", script, "bash", *served.command()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=served.env(PYTHONDONTWRITEBYTECODE="1"),  # no bytecode file cut short by the limit
        cwd=str(served.home),
    )
    raw = Raw.__new__(Raw)
    raw.process = process
    raw.send(*opening())
    assert raw.answer() is not None
    text = base64.b64encode(os.urandom(70_000)).decode()  # does not compress
    raw.send(call(1, "create", {"path": "/memories/big.txt", "file_text": text}))
    refused = raw.answer()
    assert refused is not None and refused["result"]["isError"] is True
    said = refused["result"]["content"][0]["text"]
    assert said.startswith("Error: ") and str(served.path) not in said and "Traceback" not in said
    raw.send(call(2, "create", {"path": "/memories/small.txt", "file_text": "fits\n"}))
    fine = raw.answer()
    assert (
        fine is not None and fine["result"]["content"][0]["text"] == "File created successfully at: /memories/small.txt"
    )
    assert process.stdin is not None
    process.stdin.close()
    code, errors = raw.finish()
    assert code == 0
    assert (
        "vaultmem.mcp: the tool create failed on the host's storage: [Errno 27] File too large" in errors.splitlines()
    )
    assert "Traceback" not in errors
    assert written(served) == {"/memories/small.txt": "fits\n"}
    assert_consistent(served)


# -- automatic sync ----------------------------------------------------------------------------


def with_automatic_sync(served: Served, remote: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    vaultmem = [*served.command()[:3], "--vault", str(served.path)]
    for step in (["remote", "add", "origin", str(remote)], ["policy", "set", "sync_remote=origin", "--actor", "ops"]):
        done = subprocess.run([*vaultmem, *step], env=served.env(), capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def test_a_write_just_before_the_session_ends_is_pushed_by_automatic_sync(served: Served, tmp_path: Path) -> None:
    """With the policy's automatic sync, each acknowledged write is pushed in
    the background within a second (docs/sync.md).  A client that writes and
    then ends its session at once (Claude Code closes the server's input when
    it quits) must not leave that write behind on this host: the server
    pushes it before it exits."""
    remote = tmp_path / "server.git"
    with_automatic_sync(served, remote)
    messages = [*opening(), call(1, "create", {"path": "/memories/last-words.txt", "file_text": "pushed\n"})]
    done = run_piped(served, lines(messages))
    assert done.returncode == 0, done.stderr
    assert answers(done.stdout)[1]["result"]["isError"] is False
    pushed = git_out(remote, "log", "--format=%s", "main")
    assert pushed.splitlines()[0] == "memory: create /memories/last-words.txt"


def test_an_http_server_stopped_right_after_a_write_pushes_it(served: Served, tmp_path: Path) -> None:
    remote = tmp_path / "server.git"
    with_automatic_sync(served, remote)
    with HttpServer(served) as server:
        token = (served.path / "vaultmem" / "mcp-token").read_text().strip()
        with server.session(token) as session:
            done = session.call("create", {"path": "/memories/over-http.txt", "file_text": "pushed\n"})
            assert not done.is_error, done
    pushed = git_out(remote, "log", "--format=%s", "main")
    assert pushed.splitlines()[0] == "memory: create /memories/over-http.txt"


# -- the audit tools' output ---------------------------------------------------------------------


def test_a_long_history_or_diff_is_cut_as_a_view_is(served: Served) -> None:
    """``view`` stops at 16,000 characters and says what to ask for next
    (SPEC.md); ``history`` with a large ``limit`` and a ``diff`` across much
    of the memory did not stop at all, and a client that bounds a tool's
    result (as Claude Code does) refused the whole answer.  They are cut at a
    whole line at the same cap, their last line saying how to ask for less."""
    from vaultmem import VaultMemoryTool

    long_text = "".join(f"line {n} of the long file\n" for n in range(1, 3001))
    with served.open() as vault:
        tool = VaultMemoryTool(vault, actor="ops", session="fill")
        tool.call({"command": "create", "path": "/memories/long.txt", "file_text": long_text})
        for n in range(250):
            tool.call({"command": "create", "path": f"/memories/many/{n}.txt", "file_text": "x\n"})
        tool.call({"command": "delete", "path": "/memories/long.txt"})
        first = vault.history()[-1].id
    with stdio(served) as session:
        history = session.call("history", {"limit": 1_000})
        diff = session.call("diff", {"from_version": first})
        one_file = session.call("diff", {"from_version": first, "path": "/memories/many/0.txt"})
    assert not history.is_error and not diff.is_error
    for result, what in ((history, "History"), (diff, "Diff")):
        note = result.text.splitlines()[-1]
        assert note.startswith(f"[{what} cut at 16,000 characters after "), note
        assert len(result.text) - len(note) <= 16_000
    assert history.text.splitlines()[0].endswith("delete /memories/long.txt")
    assert "ask for fewer with `limit`" in history.text.splitlines()[-1]
    assert diff.text.startswith("--- a/memories/long.txt\n+++ /dev/null\n")
    assert one_file.text == "--- /dev/null\n+++ b/memories/many/0.txt\n@@ -0,0 +1 @@\n+x\n"  # short: whole


def test_a_read_only_server_does_not_pull_into_the_vault(served: Served, tmp_path: Path) -> None:
    """``--read-only``: nothing is written.  With the policy's automatic
    sync, a read-only server's sessions pulled at start, merging what
    another host had pushed into the vault as a new version authored by the
    server's actor.  A read-only server leaves the vault as it is."""
    remote = tmp_path / "server.git"
    with_automatic_sync(served, remote)
    vaultmem = [*served.command()[:3], "--vault", str(served.path)]
    create = '{"command": "create", "path": "/memories/local.txt", "file_text": "here\\n"}'
    for step in (["call", create], ["push"]):
        done = subprocess.run([*vaultmem, *step], env=served.env(), capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    other = tmp_path / "other.vault"
    for step in (
        ["clone", str(remote), str(other)],
        ["--vault", str(other), "call", '{"command": "create", "path": "/memories/there.txt", "file_text": "x"}'],
        ["--vault", str(other), "push"],
    ):
        done = subprocess.run([*vaultmem[:3], *step], env=served.env(), capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    before = commits(served.path)
    done = run_piped(served, lines([*opening(), call(1, "view", {"path": "/memories"})]), options=("--read-only",))
    assert done.returncode == 0, done.stderr
    assert answers(done.stdout)[1]["result"]["content"][0]["text"].endswith("\n5B\t/memories/local.txt")
    assert commits(served.path) == before
