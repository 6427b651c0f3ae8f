"""``vaultmem mcp``'s read-only audit tools and its argument checks, held to
what the memory commands and ``vaultmem log`` say: a mistyped argument, a
history longer than asked for, a vault a pull merged into, and a tool call
as large as ``--max-request-bytes`` allows and one byte larger.  Every
server is a real ``python -m vaultmem mcp`` process, reached by the official
MCP client or by raw lines and raw HTTP on 127.0.0.1; vaults sync through a
bare repository made with stock git.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import HttpServer, Result, Served, SyncSession, host_paths, stdio
from test_mcp_http_hunt import ACCEPT, open_session, token_of

from vaultmem import Vault, VaultMemoryTool

TIMEOUT = 60.0  # seconds: a bound on a server answering or exiting, never an expectation of speed
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
LIMIT = 1_000  # --max-request-bytes of the servers that check it


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    return host_paths(tmp_path_factory)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[SyncSession]:
    served = Served.make(tmp_path_factory.mktemp("mcp-audit-3"), hidden)
    with stdio(served) as running:
        yield running


# -- a mistyped argument -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("history", {"path": 123}, "Error: Parameter `path` must be a string, got integer."),
        ("history", {"limit": "5"}, "Error: Parameter `limit` must be an integer, got string."),
        ("history", {"limit": True}, "Error: Parameter `limit` must be an integer, got boolean."),
        ("history", {"limit": 2.5}, "Error: Parameter `limit` must be an integer, got number."),
        (
            "read_version",
            {"path": "/memories/a.txt", "version": 7},
            "Error: Parameter `version` must be a string, got integer.",
        ),
        ("diff", {"from_version": ["main"]}, "Error: Parameter `from_version` must be a string, got array."),
        (
            "diff",
            {"from_version": "main", "to_version": {}},
            "Error: Parameter `to_version` must be a string, got object.",
        ),
        ("diff", {"from_version": "main", "path": False}, "Error: Parameter `path` must be a string, got boolean."),
    ],
    ids=["path-int", "limit-str", "limit-bool", "limit-float", "version-int", "from-list", "to-object", "path-bool"],
)
def test_an_audit_tool_names_a_mistyped_argument_as_the_memory_commands_do(
    session: SyncSession, name: str, arguments: dict[str, Any], expected: str
) -> None:
    """``view`` with ``path: 123`` says ``Error: Parameter `path` must be a
    string, got integer.``; the audit tools said ``Error: `path` must be a
    string.`` for the same mistake.  Each now answers in the memory commands'
    words, naming the type it got."""
    assert session.call(name, arguments) == Result(expected, True)


def test_the_same_mistake_gets_the_same_words_from_view_and_history(session: SyncSession) -> None:
    for value in (123, 1.5, True, [], {}):
        view = session.call("view", {"path": value})
        history = session.call("history", {"path": value})
        assert view.is_error and history.is_error
        assert view.text == history.text, (view, history)


# -- a history longer than asked for -------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[SyncSession]:
    """A vault of 25 versions: 22 of /memories/log.txt, 3 of /memories/few.txt."""
    served = Served.make(tmp_path_factory.mktemp("mcp-audit-3-long"), hidden)
    with served.open() as vault:
        tool = VaultMemoryTool(vault, actor="writer")
        tool.call({"command": "create", "path": "/memories/log.txt", "file_text": "0\n"})
        tool.call({"command": "create", "path": "/memories/few.txt", "file_text": "a\n"})
        for step in range(21):
            tool.call(
                {
                    "command": "str_replace",
                    "path": "/memories/log.txt",
                    "old_str": f"{step}\n",
                    "new_str": f"{step + 1}\n",
                }
            )
        tool.call({"command": "str_replace", "path": "/memories/few.txt", "old_str": "a", "new_str": "b"})
        tool.call({"command": "str_replace", "path": "/memories/few.txt", "old_str": "b", "new_str": "c"})
    with stdio(served) as running:
        yield running


def test_a_history_cut_at_its_default_length_says_how_many_were_left_out_and_how_to_see_them(
    written: SyncSession,
) -> None:
    """``history`` lists the newest 20 versions unless given a ``limit``.  It
    stopped at 20 lines without a word, so a client took them for the whole
    history.  Now its last line says how many older versions were left out,
    and the ``limit`` that lists them all; that ``limit`` lists them, and a
    history given a ``limit`` lists what it asked for, with no such line."""
    shown = written.call("history", {})
    assert not shown.is_error
    lines = shown.text.splitlines()
    assert len(lines) == 21
    assert lines[-1] == "[The newest 20 of 25 versions shown; 5 older ones left out. Ask for all with `limit` 25.]"
    everything = written.call("history", {"limit": 25})
    assert everything.text.splitlines()[:20] == lines[:20]
    assert len(everything.text.splitlines()) == 25 and "left out" not in everything.text
    assert written.call("history", {"limit": 24}).text.splitlines() == everything.text.splitlines()[:24]
    of_a_file = written.call("history", {"path": "/memories/log.txt"}).text.splitlines()
    assert of_a_file[-1] == "[The newest 20 of 22 versions shown; 2 older ones left out. Ask for all with `limit` 22.]"
    assert written.call("history", {"path": "/memories/few.txt"}).text.count("\n") == 2  # 3 versions, no note
    assert written.call("history", {"limit": None}) == shown  # null is the argument left out


def test_a_history_far_longer_than_shown_says_at_least_how_many_were_left_out(
    tmp_path: Path, hidden: tuple[str, ...]
) -> None:
    """A history is not read whole to count what it leaves out: past 200
    older versions it says "at least 200"."""
    served = Served.make(tmp_path / "mcp", hidden)
    with served.open() as vault:
        tool = VaultMemoryTool(vault, actor="writer")
        tool.call({"command": "create", "path": "/memories/n.txt", "file_text": "0\n"})
        for step in range(225):
            tool.call(
                {
                    "command": "str_replace",
                    "path": "/memories/n.txt",
                    "old_str": f"{step}\n",
                    "new_str": f"{step + 1}\n",
                }
            )
    with stdio(served) as session:
        lines = session.call("history", {}).text.splitlines()
    assert len(lines) == 21
    assert lines[-1] == (
        "[The newest 20 versions shown; at least 200 older ones left out. "
        "Ask for more with a larger `limit`, or for one file's with `path`.]"
    )


# -- a vault a pull merged into ----------------------------------------------------------------


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _cli_log(served: Served, path: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(served.path), "log", "--json", path],
        env=served.env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def _cli_lines(served: Served, path: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(served.path), "log", path],
        env=served.env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_history_shows_a_merge_as_vaultmem_log_does(tmp_path: Path, hidden: tuple[str, ...]) -> None:
    """Two clones edit one file (different lines), another file, and a third
    on the same line; a pull merges them, the third's other text kept beside
    it.  ``vaultmem log PATH`` lists the merge for each path it changed and
    says ``(merged ID from origin; 1 conflict kept beside)``; the history
    tool listed the same versions but said neither which version the merge
    brought in nor that a conflict was kept beside.  Both now list the same
    versions for each path, and say the same of the merge."""
    served = Served.make(tmp_path / "mcp", hidden)
    remote = tmp_path / "server.git"
    _git("init", "-q", "--bare", "--initial-branch=main", str(remote))
    with served.open() as here:
        mine = VaultMemoryTool(here, actor="host-b", session="b")
        mine.call({"command": "create", "path": "/memories/notes.md", "file_text": "one\n\ntwo\n\nthree\n"})
        mine.call({"command": "create", "path": "/memories/other.md", "file_text": "x\n"})
        mine.call({"command": "create", "path": "/memories/status.md", "file_text": "open\n"})
        here.add_remote("origin", str(remote))
        here.push()
        with Vault.clone(str(remote), tmp_path / "there.vault", key=served.key) as there:
            theirs = VaultMemoryTool(there, actor="host-a", session="a")
            theirs.call({"command": "str_replace", "path": "/memories/notes.md", "old_str": "one", "new_str": "ONE"})
            theirs.call({"command": "str_replace", "path": "/memories/other.md", "old_str": "x", "new_str": "y"})
            theirs.call({"command": "str_replace", "path": "/memories/status.md", "old_str": "open", "new_str": "shut"})
            there.push()
        mine.call({"command": "str_replace", "path": "/memories/notes.md", "old_str": "three", "new_str": "THREE"})
        mine.call({"command": "str_replace", "path": "/memories/status.md", "old_str": "open", "new_str": "done"})
        report = here.pull().merge
        assert report is not None and len(report.conflicts) == 1
        merge, merged = report.commit, report.merged
        assert here.read("/memories/notes.md") == "ONE\n\ntwo\n\nTHREE\n"
    said = "from origin; 1 conflict kept beside)"
    with stdio(served) as running:
        for path in ("/memories/notes.md", "/memories/other.md", "/memories/status.md", "/memories"):
            shown = running.call("history", {"path": path})
            assert not shown.is_error, shown
            ids = [line.split()[0] for line in shown.text.splitlines()]
            logged = [version["id"] for version in _cli_log(served, path)]
            assert ids == [full[:12] for full in logged], (path, shown.text, logged)
            if path == "/memories/status.md":  # the newer side's text stays at the path: either one
                continue
            assert ids[0] == merge[:12], (path, shown.text)
            assert shown.text.splitlines()[0].endswith(f"(merged {merged[:12]} {said}"), shown.text
            assert _cli_lines(served, path)[0].endswith(f"(merged {merged[:10]} {said}")


# -- --max-request-bytes, measured as the client sent the call ------------------------------------


def _create_line(ident: int, path: str, size: int, *, spaced: bool) -> bytes:
    """A tools/call line creating ``path`` that is exactly ``size`` bytes
    long (its line end aside), with JSON's optional spaces or without."""
    separators = (", ", ": ") if spaced else (",", ":")

    def line(text: str) -> bytes:
        arguments = {"path": path, "file_text": text}
        message = {
            "jsonrpc": "2.0",
            "id": ident,
            "method": "tools/call",
            "params": {"name": "create", "arguments": arguments},
        }
        return json.dumps(message, separators=separators, ensure_ascii=True).encode("ascii")

    base = len(line("é"))  # sent as \\u00e9: 6 bytes on the wire, 2 in UTF-8
    made = line("é" + "x" * (size - base))
    assert len(made) == size
    return made


def _stdio_answers(served: Served, body: bytes, *options: str) -> dict[object, dict[str, Any]]:
    done = subprocess.run(
        served.command(*options),
        input=body,
        capture_output=True,
        env=served.env(),
        cwd=str(served.home),
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    return {message["id"]: message for message in found}


def _text_of(answer: dict[str, Any]) -> Result:
    assert "result" in answer, answer
    [block] = answer["result"]["content"]
    return Result(block["text"], bool(answer["result"].get("isError")))


def refusal(size: int) -> Result:
    return Result(
        f"Error: the request is {size:,} bytes, over this memory server's limit of {LIMIT:,} bytes; nothing was "
        "changed. Send less text in one call: a long file in parts (create, then insert).",
        True,
    )


@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced"])
def test_over_stdio_the_cap_is_the_line_as_sent_exactly_at_the_limit_and_one_byte_over(
    tmp_path: Path, hidden: tuple[str, ...], spaced: bool
) -> None:
    """The cap measured a call's arguments written again by the server (with
    ``", "`` between items, a non-ASCII letter as its UTF-8), not the bytes
    that came: a line of 1,001 bytes passed a cap of 1,000.  Now the line
    as it arrived is measured: 1,000 bytes are served, 1,001 are refused,
    cleanly and in words, with nothing written, and the server goes on."""
    served = Served.make(tmp_path / "mcp", hidden)
    opening = [
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}).encode(),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
    ]
    at = _create_line(1, "/memories/at.txt", LIMIT, spaced=spaced)
    over = _create_line(2, "/memories/over.txt", LIMIT + 1, spaced=spaced)
    crlf = _create_line(3, "/memories/crlf.txt", LIMIT, spaced=spaced)
    view = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "view", "arguments": {"path": "/memories"}},
        }
    ).encode()
    body = b"\n".join([*opening, at, over]) + b"\n" + crlf + b"\r\n" + view + b"\n"
    answers = _stdio_answers(served, body, "--max-request-bytes", str(LIMIT))
    assert _text_of(answers[1]) == Result("File created successfully at: /memories/at.txt", False)
    assert _text_of(answers[2]) == refusal(LIMIT + 1)
    assert _text_of(answers[3]) == Result("File created successfully at: /memories/crlf.txt", False)
    listing = _text_of(answers[4])
    assert "/memories/at.txt" in listing.text and "/memories/over.txt" not in listing.text
    with served.open() as vault:
        assert vault.read("/memories/at.txt").startswith("éxx")
        assert len(vault.history()) == 2


def _post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        connection.request("POST", "/mcp", body, headers)
        response = connection.getresponse()
        status, data = response.status, response.read().decode("utf-8")
    finally:
        connection.close()
    if data.startswith(("event:", "data:", "id:", "retry:")):
        data = next(line[5:] for line in data.splitlines() if line.startswith("data:") and line[5:].strip())
    answer: dict[str, Any] = json.loads(data)
    return status, answer


@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced"])
def test_over_http_the_cap_is_the_body_as_sent_exactly_at_the_limit_and_one_byte_over(
    tmp_path: Path, hidden: tuple[str, ...], spaced: bool
) -> None:
    """Over HTTP the body as it arrived is measured: 1,000 bytes are served,
    1,001 are refused with the same words as over stdio, nothing written."""
    served = Served.make(tmp_path / "mcp", hidden)
    with HttpServer(served, "--max-request-bytes", str(LIMIT)) as server:
        headers = {**ACCEPT, **open_session(server.port, token_of(served))}
        status, answer = _post(server.port, _create_line(1, "/memories/at.txt", LIMIT, spaced=spaced), headers)
        assert status == 200 and _text_of(answer) == Result("File created successfully at: /memories/at.txt", False)
        status, answer = _post(server.port, _create_line(2, "/memories/over.txt", LIMIT + 1, spaced=spaced), headers)
        assert status == 200 and _text_of(answer) == refusal(LIMIT + 1)
        assert "Traceback" not in server.log_text()
    with served.open() as vault:
        assert [v.paths for v in vault.history()] == [("/memories/at.txt",)]


# -- text that is not Unicode, over HTTP ---------------------------------------------------------

NOT_UNICODE = "Error: the request holds text that is not Unicode (a lone surrogate)."


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("history", '{"path":"/memories/a\\ud800.txt"}'),
        ("diff", '{"from_version":"\\udfff"}'),
        ("create", '{"path":"/memories/s.txt","file_text":"half \\ud83d of a pair"}'),
    ],
    ids=["history-path", "diff-version", "create-text"],
)
def test_over_http_a_lone_surrogate_is_answered_with_the_requests_id_as_over_stdio(
    tmp_path: Path, hidden: tuple[str, ...], name: str, arguments: str
) -> None:
    """A raw client sends ``\\ud800`` (half of a UTF-16 pair) in an argument.
    Over stdio the request is answered with its id and says why; over HTTP
    the SDK's parser answered ``id: null`` ("Parse error: unexpected end of
    hex escape"), an answer no waiting request is matched to.  It now gets
    stdio's answer, with its id, and nothing is written."""
    served = Served.make(tmp_path / "mcp", hidden)
    body = (
        '{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"' + name + '","arguments":' + arguments + "}}"
    )
    with HttpServer(served) as server:
        headers = {**ACCEPT, **open_session(server.port, token_of(served))}
        status, answer = _post(server.port, body.encode("ascii"), headers)
        assert status == 400
        assert answer == {"jsonrpc": "2.0", "id": 41, "error": {"code": -32602, "message": NOT_UNICODE}}
        status, answer = _post(server.port, _create_line(42, "/memories/after.txt", 200, spaced=False), headers)
        assert status == 200 and not _text_of(answer).is_error
    over_stdio = _stdio_answers(
        served,
        b"\n".join(
            [
                json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}).encode(),
                json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
                body.encode("ascii"),
            ]
        )
        + b"\n",
    )
    assert over_stdio[41] == answer_of_stdio(41)
    with served.open() as vault:
        assert [v.paths for v in vault.history()] == [("/memories/after.txt",)]


def answer_of_stdio(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": NOT_UNICODE}}
