"""Policies against users and hostile agents: secrets that reach a file in
pieces or in disguise, policy values too large to use, quotas lowered below
what a vault holds, and expiry racing a reader.  Real vaults, real git, the
real SDK's ToolError; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock, commit_count

from vaultmem import Vault, VaultError, VaultMemoryTool
from vaultmem.cli.app import main
from vaultmem.core import detectors
from vaultmem.core.detectors import scan
from vaultmem.core.policy import Policy, parse_duration
from vaultmem.ops import expiry

ANTHROPIC_KEY = "sk-ant-api03-" + ("Qm7xK2pL9vR4tN8wZ3yB6cF1hJ5dG0sA-_" * 3)[:93] + "AA"
CARD = "4111 1111 1111 1111"
DAY = 86_400
REFUSED_EDIT = (
    "Error: Nothing was written: with this edit the file would contain {what}. This memory is kept and audited, so "
    "it must not hold secrets or personal data. Leave the value out (describe it instead, such as 'the card on "
    "file') and try again."
)
REFUSED_TEXT = (
    "Error: Nothing was written: the text contains {what}. This memory is kept and audited, so it must not hold "
    "secrets or personal data. Leave the value out (describe it instead, such as 'the card on file') and try again."
)


def files_of(vault: Vault) -> dict[str, str]:
    return {e.path: vault.read(e.path) for e in vault.listing() if e.kind == "file"}


def every_version_text(vault: Vault) -> str:
    out: list[str] = []
    for version in vault.history():
        out += [vault.read(e.path, at=version.id) for e in vault.listing(at=version.id) if e.kind == "file"]
    return "\n".join(out)


def refused(tool: VaultMemoryTool, **params: Any) -> str:
    with pytest.raises(ToolError) as info:
        tool.call(params)
    content = info.value.content
    assert isinstance(content, str)
    return content


def _tool(vault: Vault, **policy: Any) -> VaultMemoryTool:
    return VaultMemoryTool(vault, actor="bot", session="s-1", policy=policy)


# -- a secret that reaches the file in pieces ---------------------------------------------


def test_a_key_completed_by_a_str_replace_is_refused_and_nothing_changes(vault: Vault, vault_path: Path) -> None:
    """Each half is harmless alone; the file would hold the whole key."""
    tool = _tool(vault, secrets="refuse")
    tool.call({"command": "create", "path": "/memories/k.txt", "file_text": ANTHROPIC_KEY[:20] + "\n"})
    before = commit_count(vault_path)
    message = refused(tool, command="str_replace", path="/memories/k.txt", old_str="\n", new_str=ANTHROPIC_KEY[20:])
    assert message == REFUSED_EDIT.format(what="an Anthropic API key")
    assert ANTHROPIC_KEY[20:] not in message
    assert commit_count(vault_path) == before
    assert files_of(vault) == {"/memories/k.txt": ANTHROPIC_KEY[:20] + "\n"}


def test_a_card_joined_by_removing_what_stood_between_its_halves_is_refused(vault: Vault, vault_path: Path) -> None:
    tool = _tool(vault, secrets="refuse")
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "4111 1111\nsee below\n1111 1111\n"})
    before = commit_count(vault_path)
    message = refused(tool, command="str_replace", path="/memories/c.txt", old_str="\nsee below\n", new_str=" ")
    assert message == REFUSED_EDIT.format(what="a card number")
    assert commit_count(vault_path) == before


def test_a_label_put_before_an_existing_value_is_refused(vault: Vault, vault_path: Path) -> None:
    tool = _tool(vault, secrets="refuse")
    tool.call({"command": "create", "path": "/memories/db.txt", "file_text": "db: hunter2024x\n"})
    message = refused(tool, command="str_replace", path="/memories/db.txt", old_str="db:", new_str="password:")
    assert message == REFUSED_EDIT.format(what="a labelled password or secret")
    assert files_of(vault) == {"/memories/db.txt": "db: hunter2024x\n"}


def test_a_key_completed_by_an_insert_below_its_header_is_refused(vault: Vault, vault_path: Path) -> None:
    """A private key block's header was stored while the filter was off; an
    insert that completes the block writes the key."""
    block_start = "-----BEGIN PRIVATE KEY-----\n"
    off = _tool(vault)
    off.call({"command": "create", "path": "/memories/pem.txt", "file_text": block_start})
    tool = _tool(vault, secrets="refuse")
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    before = commit_count(vault_path)
    message = refused(tool, command="insert", path="/memories/pem.txt", insert_line=1, insert_text=body)
    assert message == REFUSED_EDIT.format(what="a private key")
    assert commit_count(vault_path) == before


def test_under_redact_a_key_completed_by_a_str_replace_is_stored_redacted(vault: Vault) -> None:
    tool = _tool(vault, secrets="redact")
    tool.call({"command": "create", "path": "/memories/k.txt", "file_text": "key " + ANTHROPIC_KEY[:20] + "\nend\n"})
    result = tool.call({"command": "str_replace", "path": "/memories/k.txt", "old_str": "\nend", "new_str": "\nend"})
    assert "REDACTED" not in result  # nothing new: nothing redacted
    result = tool.call(
        {
            "command": "str_replace",
            "path": "/memories/k.txt",
            "old_str": "\nend",
            "new_str": ANTHROPIC_KEY[20:] + "\nend",
        }
    )
    assert vault.read("/memories/k.txt") == "key [REDACTED:anthropic_api_key]\nend\n"
    assert result.endswith(
        "\nNote: vaultmem replaced an Anthropic API key with [REDACTED:anthropic_api_key] before storing. "
        "Do not write secrets or personal data to memory."
    )
    assert ANTHROPIC_KEY[20:] not in result
    assert ANTHROPIC_KEY not in every_version_text(vault)


def test_a_secret_already_in_a_file_still_does_not_block_other_edits(vault: Vault) -> None:
    _tool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": f"card {CARD}\nstatus: open\n"})
    tool = _tool(vault, secrets="refuse")
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "open", "new_str": "closed"})
    tool.call({"command": "insert", "path": "/memories/a.txt", "insert_line": 2, "insert_text": "owner: ada\n"})
    assert vault.read("/memories/a.txt") == f"card {CARD}\nstatus: closed\nowner: ada\n"


def test_the_cli_call_refuses_a_key_completed_in_pieces(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vaultmem call` (and `vaultmem mcp`) run the same commands as the tool."""
    vault.set_policy(actor="ops", secrets="refuse")
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", key)

    def call(params: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["--vault", str(vault_path), "call", params])
        return code, capsys.readouterr().out

    create = {"command": "create", "path": "/memories/k.txt", "file_text": ANTHROPIC_KEY[:20] + "|"}
    assert call(json.dumps(create))[0] == 0
    code, out = call(
        json.dumps({"command": "str_replace", "path": "/memories/k.txt", "old_str": "|", "new_str": ANTHROPIC_KEY[20:]})
    )
    assert (code, out) == (1, REFUSED_EDIT.format(what="an Anthropic API key") + "\n")
    assert Vault.open(vault_path, key=key).read("/memories/k.txt") == ANTHROPIC_KEY[:20] + "|"


# -- a secret in disguise ----------------------------------------------------------------------

DISGUISED = {
    "zero-width spaces in a card": "4111\u200b1111\u200b1111\u200b1111",
    "fullwidth digits and ideographic spaces": "\uff14\uff11\uff11\uff11\u3000\uff11\uff11\uff11\uff11\u3000"
    "\uff11\uff11\uff11\uff11\u3000\uff11\uff11\uff11\uff11",
    "no-break spaces in a card": "4111\u00a01111\u00a01111\u00a01111",
    "mathematical bold digits": "".join(chr(0x1D7CE + int(c)) if c.isdigit() else c for c in CARD),
    "a soft hyphen inside a key": ANTHROPIC_KEY[:30] + "\u00ad" + ANTHROPIC_KEY[30:],
    "a word joiner inside a key": ANTHROPIC_KEY[:50] + "\u2060" + ANTHROPIC_KEY[50:],
}


@pytest.mark.parametrize("name", list(DISGUISED))
def test_a_secret_with_invisible_or_compatibility_characters_is_found_whole(name: str) -> None:
    secret = DISGUISED[name]
    text = f"note: {secret} ok"
    matches = scan(text)
    assert [(m.start, m.end) for m in matches] == [(6, 6 + len(secret))]


@pytest.mark.parametrize("name", list(DISGUISED))
def test_a_disguised_secret_is_refused_and_redacted_whole(vault: Vault, vault_path: Path, name: str) -> None:
    secret = DISGUISED[name]
    message = refused(_tool(vault, secrets="refuse"), command="create", path="/memories/a.txt", file_text=secret)
    assert message.startswith("Error: Nothing was written: the text contains ")
    assert commit_count(vault_path) == 0
    _tool(vault, secrets="redact").call({"command": "create", "path": "/memories/a.txt", "file_text": f"x {secret}\n"})
    stored = vault.read("/memories/a.txt")
    assert stored.startswith("x [REDACTED:") and stored.endswith("]\n") and stored.count("[") == 1


def test_ordinary_text_in_other_scripts_is_not_flagged() -> None:
    text = (
        "注文番号は１２３４５です。カードの下４桁：１１１１。\n"
        "Заказ № 4471, доставка в пятницу.\n"
        "مرحبا\u200f بالعالم 2024\n"
        "👩\u200d💻 a note with an emoji and ﬁ ligature: ²³ office\n"
    )
    assert scan(text, detectors.detectors(personal_data=True)) == []


# -- values too large to use -------------------------------------------------------------------

HUGE = int("1" + "0" * 400)


@pytest.mark.parametrize(
    "field",
    [
        "max_file_bytes",
        "max_vault_bytes",
        "max_files",
        "expire_after",
        "sync_every",
        "content_retention",
        "checkpoint_every",
    ],
)
def test_a_policy_number_too_large_to_use_is_refused(field: str) -> None:
    with pytest.raises(VaultError) as info:
        Policy(**{field: HUGE})
    assert str(info.value).startswith(f"Error: {field} must be at most ")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("text", [f"{HUGE}d", str(HUGE), "36501d", "5215w"])
def test_a_duration_longer_than_a_century_is_refused(text: str) -> None:
    with pytest.raises(VaultError) as info:
        parse_duration(text)
    message = str(info.value)
    assert message.startswith("Error: '") and len(message) < 120
    assert message.endswith(" is longer than 100 years (36500d); write a shorter duration.")
    assert parse_duration("36500d") == 36_500 * DAY


def test_the_longest_limits_still_work(vault: Vault) -> None:
    policy = Policy(expire_after=36_500 * DAY, max_vault_bytes=2**53 - 1, max_files=2**53 - 1)
    vault.set_policy(policy, actor="ops")
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    assert tool.call({"command": "view", "path": "/memories/a.txt"}).endswith("a")


def test_a_huge_expire_after_from_the_cli_is_one_error_and_calls_keep_working(
    vault: Vault, vault_path: Path, key: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")} | {"VAULTMEM_KEY": key}

    def vaultmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), *args],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip

    assert vaultmem("call", '{"command": "create", "path": "/memories/a.txt", "file_text": "hi"}').returncode == 0
    result = vaultmem("policy", "set", f"expire_after={HUGE}")
    assert result.returncode == 2
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "longer than 100 years" in result.stderr
    assert Vault.open(vault_path, key=key).policy == Policy()
    result = vaultmem("expire", "--unread-for", f"{HUGE}s", "--dry-run")
    assert result.returncode == 2 and "longer than 100 years" in result.stderr and "Overflow" not in result.stderr
    assert vaultmem("call", '{"command": "view", "path": "/memories/a.txt"}').returncode == 0


# -- quotas lowered below what a vault holds -------------------------------------------------


def test_a_file_over_a_lowered_per_file_limit_can_still_be_shortened(vault: Vault, vault_path: Path) -> None:
    """The docs promise that edits making the memory smaller are always allowed."""
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a" * 500 + "\nb\n"})
    vault.set_policy(actor="ops", max_file_bytes=100)
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "\nb", "new_str": ""})
    assert vault.read("/memories/a.txt") == "a" * 500 + "\n"
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "a" * 500, "new_str": "a" * 499})
    before = commit_count(vault_path)
    message = refused(tool, command="insert", path="/memories/a.txt", insert_line=1, insert_text="more\n")
    assert message == (
        "Error: File /memories/a.txt would be 505 bytes; the limit is 100 bytes per file. Nothing was written. "
        "Keep the file shorter or split it into several files."
    )
    message = refused(tool, command="str_replace", path="/memories/a.txt", old_str="a\n", new_str="ab\n")
    assert "would be 501 bytes; the limit is 100 bytes per file. Nothing was written." in message
    assert commit_count(vault_path) == before
    assert vault.read("/memories/a.txt") == "a" * 499 + "\n"


# -- expiry racing a reader ---------------------------------------------------------------------


def test_a_file_read_while_expire_runs_is_kept(
    vault: Vault, vault_path: Path, key: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another agent reads a.txt after expire listed it as stale and before
    expire deletes it: what was just read is in use, and stays."""
    writer = VaultMemoryTool(vault, actor="bot")
    writer.call({"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"})
    writer.call({"command": "create", "path": "/memories/b.txt", "file_text": "bravo\n"})
    clock.advance(31 * DAY)
    reader = VaultMemoryTool(Vault.open(vault_path, key=key, clock=clock), actor="reader")
    real = expiry.find_stale

    def then_read(*args: Any) -> Any:
        found = real(*args)
        reader.call({"command": "view", "path": "/memories/a.txt"})
        return found

    monkeypatch.setattr(expiry, "find_stale", then_read)
    result = vault.expire("30d", actor="ops")
    assert result.version is not None and result.version.paths == ("/memories/b.txt",)
    assert [s.path for s in result.stale] == ["/memories/b.txt"]
    assert files_of(vault) == {"/memories/a.txt": "alpha\n"}


_EXPIRE = """
import sys
from vaultmem import Vault
vault = Vault.open(sys.argv[1], key=sys.argv[2])
result = vault.expire("30d", actor="ops-" + sys.argv[3], now=float(sys.argv[4]))
print(",".join(s.path for s in result.stale) if result.version else "-")
"""


def test_two_processes_expiring_at_once_delete_each_file_once(
    vault: Vault, vault_path: Path, key: str, clock: FakeClock
) -> None:
    tool = VaultMemoryTool(vault, actor="bot")
    names = [f"/memories/f{i}.txt" for i in range(12)]
    for name in names:
        tool.call({"command": "create", "path": name, "file_text": name + "\n"})
    later = str(clock.now + 31 * DAY)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _EXPIRE, str(vault_path), key, str(i), later], stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    outs = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert sorted(outs) == ["-", ",".join(sorted(names))]
    assert commit_count(vault_path) == len(names) + 1
    assert files_of(Vault.open(vault_path, key=key)) == {}


def test_expiry_does_not_depend_on_the_local_time_zone(vault_path: Path, key: str, tmp_path: Path) -> None:
    """Times are Unix seconds throughout: two processes in time zones 14
    hours apart (and one in a DST switch) list the same files."""
    clock = FakeClock(1_790_000_000.0)
    with Vault.init(vault_path, key=key, clock=clock) as vault:
        VaultMemoryTool(vault, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    script = (
        "import sys\nfrom vaultmem import Vault\nv = Vault.open(sys.argv[1], key=sys.argv[2])\n"
        "print([s.path for s in v.expire(sys.argv[3], dry_run=True, now=float(sys.argv[4])).stale])"
    )
    seen: dict[tuple[str, str], str] = {}
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin"):
        env = dict(os.environ, TZ=zone)
        for age, now in (("1h", 1_790_000_000 + 3599), ("1h", 1_790_000_000 + 3600)):
            out = subprocess.run(
                [sys.executable, "-c", script, str(vault_path), key, age, str(now)],
                capture_output=True, text=True, env=env, check=True,
            ).stdout  # fmt: skip
            seen[(zone, str(now))] = out.strip()
    assert {v for k, v in seen.items() if k[1].endswith("3599")} == {"[]"}
    assert {v for k, v in seen.items() if k[1].endswith("3600")} == {"['/memories/a.txt']"}


def test_the_characters_folded_before_scanning_are_exactly_those_that_disguise_ascii() -> None:
    """The detectors' table is built from a few pages of Unicode; every
    disguising character of the whole of Unicode must be in it."""
    import re

    everywhere = {c for c in range(sys.maxunicode + 1) if detectors.disguises(chr(c))}
    assert everywhere == {c for c in range(sys.maxunicode + 1) if detectors._disguised(chr(c)) == [(0, 1)]}
    assert all(re.fullmatch("[\\x00-\\x7f]", chr(c)) is None for c in everywhere)


def test_a_policy_number_of_thousands_of_digits_is_one_clear_error(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past 4,300 digits Python will not read a number at all."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    for change in (f"max_files={'9' * 5000}", f"expire_after={'9' * 5000}d"):
        capsys.readouterr()
        assert main(["--vault", str(vault_path), "policy", "set", change]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and len(err) < 200, err
        assert "unexpected" not in err and "ValueError" not in err
    assert Vault.open(vault_path, key=key).policy == Policy()


# -- a read-only memory server never expires anything ----------------------------------------


def test_a_read_only_mcp_server_runs_no_automatic_expiry(tmp_path: Path) -> None:
    """``vaultmem mcp --read-only`` promises that nothing is written; the
    policy's automatic expiry (and retention) is a write."""
    from mcp_helpers import Served, stdio

    served = Served.make(tmp_path / "mcp")
    past = FakeClock(1_700_000_000.0)  # 2023: every file is long unused by the server's clock
    with Vault.open(served.path, key=served.key, clock=past) as vault:
        tool = VaultMemoryTool(vault, actor="bot")
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"})
        vault.set_policy(actor="ops", expire_after="1d", content_retention="1d")
    before = commit_count(served.path)
    with stdio(served, "--actor", "reviewer", "--read-only") as session:
        assert session.call("view", {"path": "/memories/a.txt"}).text.endswith("alpha")
        assert not session.call("view", {"path": "/memories"}).is_error
        assert not session.call("history", {}).is_error
    assert commit_count(served.path) == before
    with served.open() as vault:
        assert files_of(vault) == {"/memories/a.txt": "alpha\n"}


# -- a secret spelled by a folder's new name and the names inside it ---------------------------


@pytest.mark.parametrize("mode", ["refuse", "redact"])
def test_a_folder_rename_that_makes_a_files_path_hold_a_secret_is_refused(
    vault: Vault, vault_path: Path, mode: str
) -> None:
    """``/memories/password=hun`` is harmless and so is ``ter2024.md``; the
    moved file's path would be ``/memories/password=hun/ter2024.md``."""
    tool = _tool(vault, secrets=mode)
    tool.call({"command": "create", "path": "/memories/x/ter2024.md", "file_text": "notes\n"})
    tool.call({"command": "create", "path": "/memories/y/password=hun", "file_text": "fine\n"})
    before = commit_count(vault_path)
    message = refused(tool, command="rename", old_path="/memories/x", new_path="/memories/password=hun")
    assert message == (
        "Error: Nothing was written: the path contains a labelled password or secret, and paths are visible in "
        "the audit log. Choose a name without it."
    )
    assert commit_count(vault_path) == before
    assert sorted(files_of(vault)) == ["/memories/x/ter2024.md", "/memories/y/password=hun"]
    tool.call({"command": "rename", "old_path": "/memories/x", "new_path": "/memories/notes"})
    assert sorted(files_of(vault)) == ["/memories/notes/ter2024.md", "/memories/y/password=hun"]


# -- a damaged policy stops writes, never reads -----------------------------------------------


def _garbage_ref(vault_path: Path) -> None:
    (vault_path / "refs" / "heads" / "vaultmem-policy").write_text("garbage\n", encoding="utf-8")


def _unsealed_commit(vault_path: Path) -> None:
    """A policy commit made with stock git (no key: no seal) saying secrets=off."""
    tree = subprocess.run(
        ["git", "-C", str(vault_path), "rev-parse", "vaultmem-policy^{tree}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env = dict(os.environ, GIT_AUTHOR_NAME="m", GIT_AUTHOR_EMAIL="m", GIT_COMMITTER_NAME="m", GIT_COMMITTER_EMAIL="m")
    commit = subprocess.run(
        ["git", "-C", str(vault_path), "commit-tree", tree, "-p", "vaultmem-policy", "-m", "policy: forged"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout.strip()  # fmt: skip
    subprocess.run(["git", "-C", str(vault_path), "update-ref", "refs/heads/vaultmem-policy", commit], check=True)


@pytest.mark.parametrize("damage", [_garbage_ref, _unsealed_commit])
def test_a_tool_made_while_the_policy_is_damaged_reads_and_refuses_writes(
    vault_path: Path, key: str, damage: Callable[[Path], None]
) -> None:
    with Vault.init(vault_path, key=key) as vault:
        VaultMemoryTool(vault, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
        vault.set_policy(actor="ops", secrets="refuse")
    damage(vault_path)
    before = commit_count(vault_path)
    with Vault.open(vault_path, key=key) as vault:
        tool = VaultMemoryTool(vault, actor="bot")
        assert tool.call({"command": "view", "path": "/memories/a.txt"}).endswith("a")
        message = refused(tool, command="create", path="/memories/b.txt", file_text="b\n")
        assert message.startswith("Error: the vault's policy ")
        assert "Writes are refused until an operator " in message
        assert "Traceback" not in message and str(vault_path) not in message
    assert commit_count(vault_path) == before


# -- quotas held exactly, in bytes, by processes racing ------------------------------------------

_WRITER = """
import sys
from anthropic.lib.tools import ToolError
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[1], key=sys.argv[2])
tool = VaultMemoryTool(vault, actor="bot-" + sys.argv[3])
made = 0
for j in range(8):
    try:
        tool.call({"command": "create", "path": f"/memories/p{sys.argv[3]}/f{j}.txt", "file_text": "é" * 50})
        made += 1
    except ToolError:
        pass
    try:
        tool.call({"command": "str_replace", "path": "/memories/shared.txt", "old_str": "S", "new_str": "S" + "ü" * 20})
        made += 1
    except ToolError:
        pass
print(made)
"""


def test_quotas_hold_exactly_in_bytes_when_processes_race(vault: Vault, vault_path: Path, key: str) -> None:
    """Three processes create files of 100 bytes (50 characters) and grow a
    shared file by 40 bytes at once: the vault never holds more bytes or
    files than the policy allows, counted in UTF-8 bytes, not characters."""
    VaultMemoryTool(vault, actor="ops").call({"command": "create", "path": "/memories/shared.txt", "file_text": "S"})
    vault.set_policy(actor="ops", max_files=6, max_vault_bytes=1000)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(vault_path), key, str(i)], stdout=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    made = sum(int(run.communicate(timeout=180)[0]) for run in runs)
    assert all(run.returncode == 0 for run in runs)
    files = files_of(Vault.open(vault_path, key=key))
    total = sum(len(text.encode("utf-8")) for text in files.values())
    assert len(files) <= 6 and total <= 1000, (len(files), total)
    assert total > 1000 - 100  # it filled up: the last refusals were real
    assert commit_count(vault_path) == 1 + made


def test_the_limits_count_utf8_bytes_not_characters(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_file_bytes=10, max_vault_bytes=14)
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "é" * 5})  # 5 characters, 10 bytes
    message = refused(tool, command="create", path="/memories/b.txt", file_text="€€")  # 2 characters, 6 bytes
    assert message.startswith("Error: Nothing was written: this would bring the memory to 16 bytes, over this ")
    message = refused(tool, command="str_replace", path="/memories/a.txt", old_str="é" * 5, new_str="é" * 6)
    assert "would be 12 bytes; the limit is 10 bytes per file. Nothing was written." in message
    assert files_of(vault) == {"/memories/a.txt": "é" * 5}


# -- a policy changed while a write waits ---------------------------------------------------------


def test_a_write_that_read_the_policy_before_an_operator_changed_it_obeys_the_new_one(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's change is acknowledged before the write reaches the
    writer lock: the write must not store what the new policy refuses."""
    tool = VaultMemoryTool(vault, actor="bot")
    operator = Vault.open(vault_path, key=key)
    guard = tool.commands.guard
    real = guard.filter_text

    def then_the_operator_acts(policy: Policy, text: str) -> Any:
        found = real(policy, text)
        operator.set_policy(actor="ops", secrets="refuse", max_files=1)
        return found

    monkeypatch.setattr(guard, "filter_text", then_the_operator_acts)
    message = refused(tool, command="create", path="/memories/card.txt", file_text=f"card {CARD}\n")
    assert message == REFUSED_TEXT.format(what="a card number")
    assert commit_count(vault_path) == 0
    monkeypatch.setattr(guard, "filter_text", real)
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    operator.set_policy(actor="ops", secrets="off", max_files=None)
    monkeypatch.setattr(guard, "filter_text", then_the_operator_acts)
    message = refused(tool, command="create", path="/memories/b.txt", file_text="b\n")
    assert message.startswith("Error: Nothing was written: the memory already holds 1 file,")
    assert files_of(vault) == {"/memories/a.txt": "a\n"}


# -- a secret in base64 ------------------------------------------------------------------------


def _b64(text: str, urlsafe: bool = False) -> str:
    import base64

    raw = text.encode("utf-8")
    return (base64.urlsafe_b64encode(raw) if urlsafe else base64.b64encode(raw)).decode("ascii")


@pytest.mark.parametrize(
    ("secret", "kind", "urlsafe"),
    [
        (ANTHROPIC_KEY, "anthropic_api_key", False),
        (ANTHROPIC_KEY, "anthropic_api_key", True),
        (f"card {CARD}", "card_number", False),
        ("db password: hunter2024x", "labelled_secret", False),
        ('{"api_key": "c2VjcmV0LXZhbHVlLTIwMjQ"}', "labelled_secret", True),
    ],
)
def test_a_secret_written_in_base64_is_found_and_the_whole_blob_redacted(secret: str, kind: str, urlsafe: bool) -> None:
    blob = _b64(secret, urlsafe)
    text = f"config blob: {blob}\nend\n"
    assert [(m.kind, text[m.start : m.end]) for m in scan(text)] == [(kind, blob)]
    assert detectors.redact(text, scan(text)) == f"config blob: [REDACTED:{kind}]\nend\n"


@pytest.mark.parametrize(
    "text",
    [
        _b64("The customer prefers tea and calls on Tuesdays after lunch."),
        _b64("order 4471-2290 shipped; ticket 88231 closed"),
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "3f2a9c01d4e5b6a7c8d9e0f1a2b3c4d5e6f7a8b9",
        "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8",
        "/usr/lib/python3/dist-packages/setuptools/command/build_py.py",
    ],
)
def test_ordinary_base64_and_look_alikes_are_not_flagged(text: str) -> None:
    assert scan(text, detectors.detectors(personal_data=True)) == []


def test_a_base64_encoded_key_is_refused_by_the_tool(vault: Vault, vault_path: Path) -> None:
    message = refused(
        _tool(vault, secrets="refuse"), command="create", path="/memories/a.txt", file_text=_b64(ANTHROPIC_KEY)
    )
    assert message == REFUSED_TEXT.format(what="an Anthropic API key")
    assert commit_count(vault_path) == 0


def test_a_custom_pattern_reads_through_disguises_like_the_built_ins(vault: Vault, vault_path: Path) -> None:
    tool = _tool(vault, secrets="redact", patterns={"ticket_secret": "TS-[0-9]{6}"})
    disguised = "t TS-12\u200b3456 and \uff34\uff33\uff0d\uff16\uff15\uff14\uff13\uff12\uff11\n"
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": disguised})
    assert vault.read("/memories/a.txt") == "t [REDACTED:ticket_secret] and [REDACTED:ticket_secret]\n"


def test_a_key_in_base64_after_a_slash_is_found_in_text_and_in_paths(vault: Vault, vault_path: Path) -> None:
    """``/`` is a base64 character too: the run before it must not hide the blob."""
    blob = _b64(ANTHROPIC_KEY, urlsafe=True)
    text = f"see https://paste.example.net/raw/{blob} and /tmp/{blob}\n"
    assert [(m.kind, text[m.start : m.end]) for m in scan(text)] == [("anthropic_api_key", blob)] * 2
    message = refused(_tool(vault, secrets="redact"), command="create", path=f"/memories/{blob}", file_text="x\n")
    assert message.startswith("Error: Nothing was written: the path contains an Anthropic API key")
    assert commit_count(vault_path) == 0
