"""`vaultmem policy show|set|log` and `vaultmem expire`, run in-process through
``vaultmem.cli.app`` on real vaults, with exact output.

The vault's history is written with a FakeClock set in the past; the CLI
itself runs on the real clock, so every file is long unused by then.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import FakeClock, commit_count, git

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main
from vaultmem.core.policy import Policy
from vaultmem.repo.policy import POLICY_REF

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc).timestamp()
STAMP = "2025-01-06T09:00:00Z"
LATER = "2025-01-16T09:00:00Z"  # T0 + 10 days
ID = re.compile(r"[0-9a-f]{10}")
DEFAULT_SHOW = (
    'secrets            "off"\n'
    "personal_data      false\n"
    "patterns           {}\n"
    "max_file_bytes     102400\n"
    "max_vault_bytes    null\n"
    "max_files          null\n"
    "expire_after       null\n"
    "sync_remote        null\n"
    "sync_every         null\n"
    "content_retention  null\n"
    "require_signatures false\n"
    "checkpoint_every   null\n"
)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Setup:
    path: Path
    key: str
    clock: FakeClock

    def open(self) -> Vault:
        return Vault.open(self.path, key=self.key, clock=self.clock)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A vault with a.txt and dir/c.txt written at T0 and b.txt at T0+10d."""
    clock = FakeClock(T0)
    key = generate_key()
    path = tmp_path / "agent.vault"
    with Vault.init(path, key=key, clock=clock) as vault:
        bot = VaultMemoryTool(vault, actor="support-bot", session="sess-1")
        bot.call({"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"})
        bot.call({"command": "create", "path": "/memories/dir/c.txt", "file_text": "charlie\n"})
        clock.advance(10 * 86_400)
        bot.call({"command": "create", "path": "/memories/b.txt", "file_text": "bravo\n"})
    yield Setup(path, key, clock)


@pytest.fixture
def cli(setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``cli("policy", "show")`` runs ``vaultmem --vault V policy show`` in-process with VAULTMEM_KEY set."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", setup.key)

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(["--vault", str(setup.path), *args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def policy_commits(path: Path) -> int:
    out = git(path, "rev-list", "--count", POLICY_REF, check=False).strip()
    return int(out) if out else 0


def one_error(result: Result) -> str:
    assert result.code == 2, result
    assert result.out == ""
    assert result.err.startswith("vaultmem: ") and result.err.endswith("\n")
    assert result.err.count("\n") == 1, result.err
    return result.err[len("vaultmem: ") : -1]


# -- policy show -------------------------------------------------------------------


def test_policy_show_prints_the_defaults_one_field_a_line(cli: Callable[..., Result]) -> None:
    result = cli("policy", "show")
    assert (result.code, result.out, result.err) == (0, DEFAULT_SHOW, "")


def test_policy_show_prints_json_values_and_expire_after_as_a_duration(
    cli: Callable[..., Result], setup: Setup
) -> None:
    setup.open().set_policy(
        actor="ops", secrets="refuse", personal_data=True, patterns={"ticket_secret": "TS-[0-9]{6}"},
        max_vault_bytes=5_000_000, max_files=500, expire_after="30d", sync_remote="origin", sync_every="90s",
    )  # fmt: skip
    result = cli("policy", "show")
    assert result.code == 0
    assert result.out == (
        'secrets            "refuse"\n'
        "personal_data      true\n"
        'patterns           {"ticket_secret": "TS-[0-9]{6}"}\n'
        "max_file_bytes     102400\n"
        "max_vault_bytes    5000000\n"
        "max_files          500\n"
        "expire_after       30d\n"
        'sync_remote        "origin"\n'
        "sync_every         90s\n"
        "content_retention  null\n"
        "require_signatures false\n"
        "checkpoint_every   null\n"
    )


@pytest.mark.parametrize(("seconds", "shown"), [(43_200, "12h"), (1_209_600, "2w"), (90, "90s"), (5_400, "90m")])
def test_policy_show_uses_the_largest_whole_unit(
    cli: Callable[..., Result], setup: Setup, seconds: int, shown: str
) -> None:
    setup.open().set_policy(actor="ops", expire_after=seconds)
    assert cli("policy", "show").out.splitlines()[-6] == f"expire_after       {shown}"


def test_policy_show_json_is_the_policy_dict(cli: Callable[..., Result], setup: Setup) -> None:
    assert cli("policy", "show", "--json").json() == Policy().to_dict()
    policy = Policy(secrets="redact", patterns={"a": "A-1"}, max_files=3, expire_after=3600)
    setup.open().set_policy(policy, actor="ops")
    result = cli("policy", "show", "--json")
    assert result.code == 0
    assert result.json() == {
        "secrets": "redact",
        "personal_data": False,
        "patterns": {"a": "A-1"},
        "max_file_bytes": 102400,
        "max_vault_bytes": None,
        "max_files": 3,
        "expire_after": 3600,
        "sync_remote": None,
        "sync_every": None,
        "content_retention": None,
        "require_signatures": False,
        "checkpoint_every": None,
    }


def test_policy_show_of_a_tampered_policy_exits_2_naming_the_commit(cli: Callable[..., Result], setup: Setup) -> None:
    setup.open().set_policy(actor="ops", secrets="refuse")
    repo = pygit2.Repository(str(setup.path))
    tip = repo.references[POLICY_REF].peel(pygit2.Commit)
    forged = repo.create_commit(None, tip.author, tip.committer, "policy: forged\n", tip.tree_id, [tip.id])
    repo.references.create(POLICY_REF, forged, force=True)
    message = one_error(cli("policy", "show"))
    assert message.startswith(f"the vault's policy (commit {forged}) failed its seal")
    assert one_error(cli("policy", "log")).startswith(f"the vault's policy (commit {forged})")


# -- policy set --------------------------------------------------------------------


def test_policy_set_prints_each_change_and_makes_one_commit(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli(
        "policy", "set", "secrets=refuse", "max_files=500", "personal_data=true",
        'patterns={"ticket_secret": "TS-[0-9]{6}"}', "max_vault_bytes=1000000",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.err == ""
    assert result.out == (
        'secrets: "off" -> "refuse"\n'
        "personal_data: false -> true\n"
        'patterns: {} -> {"ticket_secret": "TS-[0-9]{6}"}\n'
        "max_vault_bytes: null -> 1000000\n"
        "max_files: null -> 500\n"
    )
    assert policy_commits(setup.path) == 1
    vault = setup.open()
    assert vault.policy == Policy(
        secrets="refuse", personal_data=True, patterns={"ticket_secret": "TS-[0-9]{6}"},
        max_vault_bytes=1_000_000, max_files=500,
    )  # fmt: skip
    latest = vault.policy_history()[0]
    assert (latest.actor, latest.session) == ("cli", None)
    assert latest.changed == ("secrets", "personal_data", "patterns", "max_vault_bytes", "max_files")


def test_policy_set_records_actor_and_session(cli: Callable[..., Result], setup: Setup) -> None:
    assert cli("policy", "set", "max_files=9", "--actor", "alice", "--session", "ticket-77").code == 0
    latest = setup.open().policy_history()[0]
    assert (latest.actor, latest.session, latest.changed) == ("alice", "ticket-77", ("max_files",))
    assert git(setup.path, "log", "-1", "--format=%an", POLICY_REF).strip() == "alice"


def test_policy_set_reads_expire_after_as_a_duration(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli("policy", "set", "expire_after=30d")
    assert result.code == 0
    assert result.out in ("expire_after: null -> 2592000\n", "expire_after: null -> 30d\n")
    assert setup.open().policy.expire_after == 2_592_000
    assert cli("policy", "show").out.splitlines()[-6] == "expire_after       30d"
    assert cli("policy", "set", "expire_after=2592000s").out == "Nothing changed: the policy already says that.\n"


def test_policy_set_without_a_change_commits_nothing(cli: Callable[..., Result], setup: Setup) -> None:
    assert cli("policy", "set", "secrets=refuse").code == 0
    result = cli("policy", "set", "secrets=refuse")
    assert (result.code, result.out, result.err) == (0, "Nothing changed: the policy already says that.\n", "")
    assert cli("policy", "set", "max_files=null").out == "Nothing changed: the policy already says that.\n"
    assert policy_commits(setup.path) == 1
    assert commit_count(setup.path) == 3  # main untouched


@pytest.mark.parametrize("word", ["off", "none", "null", "None", "OFF"])
def test_off_none_and_null_clear_a_limit(cli: Callable[..., Result], setup: Setup, word: str) -> None:
    assert cli("policy", "set", "max_files=5", "max_vault_bytes=900").code == 0
    result = cli("policy", "set", f"max_files={word}", f"max_vault_bytes={word}")
    assert (result.code, result.err) == (0, "")
    assert result.out == "max_vault_bytes: 900 -> null\nmax_files: 5 -> null\n"
    assert setup.open().policy == Policy()


@pytest.mark.parametrize("word", ["off", "none", "null"])
def test_off_none_and_null_turn_automatic_expiry_off(cli: Callable[..., Result], setup: Setup, word: str) -> None:
    assert cli("policy", "set", "expire_after=30d").code == 0
    result = cli("policy", "set", f"expire_after={word}")
    assert (result.code, result.err) == (0, "")
    assert result.out == "expire_after: 30d -> null\n"
    assert setup.open().policy.expire_after is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("secrets=maybe", "secrets must be one of off, redact, refuse, not 'maybe'."),
        ("secrets=off=1", "secrets must be one of off, redact, refuse, not 'off=1'."),
        ("colour=red", "unknown policy field: colour."),
        ("max_files=0", "max_files must be a whole number of at least 1 or null."),
        ("max_files=many", "max_files must be a whole number of at least 1 or null."),
        ("max_file_bytes=off", "max_file_bytes must be a whole number of at least 1."),
        ("personal_data=maybe", "personal_data must be true or false."),
        (
            "expire_after=soon",
            "'soon' is not a duration; write a whole number with s, m, h, d or w, such as 30d or 12h.",
        ),
        ("nonsense", "'nonsense' is not FIELD=VALUE (such as secrets=refuse)."),
        ("=refuse", "'=refuse' is not FIELD=VALUE (such as secrets=refuse)."),
    ],
)
def test_a_bad_policy_set_exits_2_with_one_line_and_changes_nothing(
    cli: Callable[..., Result], setup: Setup, change: str, message: str
) -> None:
    assert one_error(cli("policy", "set", "max_files=7", change)) == message
    assert policy_commits(setup.path) == 0
    assert setup.open().policy == Policy()


def test_policy_without_a_subcommand_or_fields_is_a_usage_error(cli: Callable[..., Result], setup: Setup) -> None:
    assert one_error(cli("policy", "set")).endswith("(see `vaultmem policy set --help`)")
    assert one_error(cli("policy")).endswith("(see `vaultmem policy --help`)")
    assert one_error(cli("policy", "drop")).startswith(
        "'drop' is not a vaultmem policy command. It takes show, set, log."
    )
    assert policy_commits(setup.path) == 0


def test_a_policy_set_by_the_cli_governs_the_tool(cli: Callable[..., Result], setup: Setup) -> None:
    assert cli("policy", "set", "max_files=3").code == 0
    result = cli("call", '{"command": "create", "path": "/memories/d.txt", "file_text": "delta"}')
    assert result.code == 1
    assert result.out.startswith("Error: Nothing was written: the memory already holds 3 files")
    assert commit_count(setup.path) == 3


# -- policy log --------------------------------------------------------------------


def test_policy_log_lists_changes_newest_first(cli: Callable[..., Result], setup: Setup) -> None:
    vault = setup.open()
    setup.clock.advance(60)
    vault.set_policy(actor="ops", session="change-1", secrets="refuse", max_files=100)
    first = git(setup.path, "rev-parse", POLICY_REF).strip()
    setup.clock.advance(3600)
    vault.set_policy(actor="alice", expire_after="30d")
    second = git(setup.path, "rev-parse", POLICY_REF).strip()
    result = cli("policy", "log")
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"{second[:10]}  2025-01-16T10:01:00Z  alice  -  expire_after\n"
        f"{first[:10]}  2025-01-16T09:01:00Z  ops  change-1  secrets, max_files\n"
    )
    data = cli("policy", "log", "--json").json()
    assert data == [
        {
            "id": second,
            "time": "2025-01-16T10:01:00Z",
            "actor": "alice",
            "session": None,
            "changed": ["expire_after"],
            "policy": Policy(secrets="refuse", max_files=100, expire_after=2_592_000).to_dict(),
        },
        {
            "id": first,
            "time": "2025-01-16T09:01:00Z",
            "actor": "ops",
            "session": "change-1",
            "changed": ["secrets", "max_files"],
            "policy": Policy(secrets="refuse", max_files=100).to_dict(),
        },
    ]


def test_policy_log_of_a_vault_without_a_policy_is_empty(cli: Callable[..., Result]) -> None:
    assert cli("policy", "log") == Result(0, "", "")
    assert cli("policy", "log", "--json").json() == []


def test_a_change_made_by_the_cli_appears_in_the_log(cli: Callable[..., Result]) -> None:
    cli("policy", "set", "secrets=redact", "--actor", "ops")
    lines = cli("policy", "log").out.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"[0-9a-f]{10}  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  ops  -  secrets", lines[0]), lines


# -- expire ------------------------------------------------------------------------


def test_expire_dry_run_lists_files_and_changes_nothing(cli: Callable[..., Result], setup: Setup) -> None:
    head = git(setup.path, "rev-parse", "main").strip()
    result = cli("expire", "--unread-for", "30d", "--dry-run")
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"{STAMP}  /memories/a.txt\n"
        f"{LATER}  /memories/b.txt\n"
        f"{STAMP}  /memories/dir/c.txt\n"
        "Would delete 3 files unused for 30 days or more (dry run: nothing changed).\n"
    )
    assert git(setup.path, "rev-parse", "main").strip() == head


def test_expire_deletes_and_names_the_new_version(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli("expire", "--unread-for", "30d")
    assert (result.code, result.err) == (0, "")
    version = setup.open().history(limit=1)[0]
    assert result.out == (
        f"{STAMP}  /memories/a.txt\n"
        f"{LATER}  /memories/b.txt\n"
        f"{STAMP}  /memories/dir/c.txt\n"
        f"Deleted 3 files unused for 30 days or more: new version {version.id[:10]}.\n"
    )
    assert (version.command, version.actor, version.session) == ("expire", "cli", None)
    assert version.paths == ("/memories/a.txt", "/memories/b.txt", "/memories/dir/c.txt")
    assert commit_count(setup.path) == 4
    assert setup.open().listing() == []


def test_expire_says_one_file_in_the_singular(cli: Callable[..., Result], setup: Setup) -> None:
    with Vault.open(setup.path, key=setup.key) as vault:  # the real clock: these reads are recent
        vault.note_read("/memories/a.txt")
        vault.note_read("/memories/dir/c.txt")
    result = cli("expire", "--unread-for", "30d", "--actor", "ops", "--session", "sweep-3")
    assert (result.code, result.err) == (0, "")
    lines = result.out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == f"{LATER}  /memories/b.txt"
    assert re.fullmatch(r"Deleted 1 file unused for 30 days or more: new version [0-9a-f]{10}\.", lines[1]), lines
    version = setup.open().history(limit=1)[0]
    assert lines[1].endswith(f" {version.id[:10]}.")
    assert (version.actor, version.session, version.paths) == ("ops", "sweep-3", ("/memories/b.txt",))


def test_expire_with_nothing_stale_says_so(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli("expire", "--unread-for", "5200w")
    assert result == Result(0, "Nothing to expire: every file was read or written in the last 5200 weeks.\n", "")
    assert commit_count(setup.path) == 3
    dry = cli("expire", "--unread-for", "5200w", "--dry-run")
    assert dry.out == "Nothing to expire: every file was read or written in the last 5200 weeks.\n"


def test_expire_json_dry_run_and_real(cli: Callable[..., Result], setup: Setup) -> None:
    files = [
        {"path": "/memories/a.txt", "last_used": STAMP},
        {"path": "/memories/b.txt", "last_used": LATER},
        {"path": "/memories/dir/c.txt", "last_used": STAMP},
    ]
    assert cli("expire", "--unread-for", "30d", "--dry-run", "--json").json() == {
        "dry_run": True,
        "version": None,
        "files": files,
    }
    assert commit_count(setup.path) == 3
    result = cli("expire", "--unread-for", "30d", "--json")
    assert result.code == 0
    data = result.json()
    assert data == {"dry_run": False, "version": setup.open().history(limit=1)[0].id, "files": files}
    assert cli("expire", "--unread-for", "30d", "--json").json() == {"dry_run": False, "version": None, "files": []}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--unread-for", "30x"), "'30x' is not a duration; write a whole number with s, m, h, d or w"),
        (("--unread-for", "0d"), "is not a duration"),
        (("--unread-for", ""), "is not a duration"),
        ((), "--unread-for"),
        (("--unread-for", "30d", "--actor", "bad<actor>"), "actor"),
    ],
)
def test_a_bad_expire_exits_2_and_changes_nothing(
    cli: Callable[..., Result], setup: Setup, args: tuple[str, ...], words: str
) -> None:
    assert words in one_error(cli("expire", *args))
    assert commit_count(setup.path) == 3
