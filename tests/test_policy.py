"""Per-vault policies: the values, their sealed branch, and what they do to
Claude's writes and to imports (the secrets filter, the quotas, the per-file
limit), on real vaults with real git.

Tampering is done as an attacker without the key would: with pygit2 or the
stock ``git`` binary on the repository, never through the vault.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pygit2
import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock, commit_count, git

from vaultmem import IntegrityError, LimitError, Vault, VaultError, VaultMemoryTool
from vaultmem.core.policy import Policy, format_duration, parse_duration
from vaultmem.repo.policy import POLICY_REF

BLOB = pygit2.enums.FileMode.BLOB

# An Anthropic-style key: the documented prefix, 93 URL-safe characters, "AA".
ANTHROPIC_KEY = "sk-ant-api03-" + ("Qm7xK2pL9vR4tN8wZ3yB6cF1hJ5dG0sA-_" * 3)[:93] + "AA"
CARD = "4111 1111 1111 1111"  # passes Luhn, a Visa prefix and length
TICKET = {"ticket_secret": r"TS-[0-9]{6}"}

REFUSED_TEXT = (
    "Error: Nothing was written: the text contains {what}. This memory is kept and audited, so it must not hold "
    "secrets or personal data. Leave the value out (describe it instead, such as 'the card on file') and try again."
)
REFUSED_PATH = (
    "Error: Nothing was written: the path contains {what}, and paths are visible in the audit log. "
    "Choose a name without it."
)
NOTE = "\nNote: vaultmem replaced {what} with {marks} before storing. Do not write secrets or personal data to memory."


def too_many_files(count: int, most: int) -> str:
    return (
        f"Error: Nothing was written: the memory already holds {count:,} files, the most this vault allows "
        f"({most:,}). Delete files that are no longer needed, or consolidate related notes into fewer files, "
        "then try again."
    )


def too_many_bytes(after: int, limit: int, now: int) -> str:
    return (
        f"Error: Nothing was written: this would bring the memory to {after:,} bytes, over this vault's limit of "
        f"{limit:,} bytes (it holds {now:,} now). Delete or shorten files that are no longer needed, or consolidate "
        "them, then try again."
    )


# -- helpers ---------------------------------------------------------------------


def files_of(vault: Vault, at: str | None = None) -> dict[str, str]:
    """Every file of the memory (now or at ``at``) as ``{path: text}``."""
    return {e.path: vault.read(e.path, at=at) for e in vault.listing(at=at) if e.kind == "file"}


def refused(tool: VaultMemoryTool, **params: Any) -> str:
    """The ToolError message of a call that must fail."""
    with pytest.raises(ToolError) as info:
        tool.call(params)
    content = info.value.content
    assert isinstance(content, str)
    return content


def create(tool: VaultMemoryTool, path: str, text: str) -> str:
    return tool.call({"command": "create", "path": path, "file_text": text})


def policy_tip(vault_path: Path) -> str:
    return git(vault_path, "rev-parse", "--verify", "--quiet", POLICY_REF, check=False).strip()


def policy_commits(vault_path: Path) -> int:
    out = git(vault_path, "rev-list", "--count", POLICY_REF, check=False).strip()
    return int(out) if out else 0


def fsck(vault_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True, text=True
    )


def all_versions_text(vault: Vault) -> str:
    """Every file of every version, concatenated: what the history holds."""
    out: list[str] = []
    for version in vault.history():
        out += files_of(vault, at=version.id).values()
    return "\n".join(out)


@contextlib.contextmanager
def unchanged(vault: Vault, vault_path: Path) -> Iterator[None]:
    """The block must leave main, its files and the commit count as they were."""
    head = git(vault_path, "rev-parse", "main", check=False).strip()
    count = commit_count(vault_path)
    before = files_of(vault)
    yield
    assert git(vault_path, "rev-parse", "main", check=False).strip() == head
    assert commit_count(vault_path) == count
    assert files_of(vault) == before


def sdk_memories(base: Path, files: dict[str, str]) -> Path:
    """An SDK filesystem memory folder: ``base/memories/<rel>``."""
    for rel, text in files.items():
        target = base / "memories" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return base


# -- Policy values -----------------------------------------------------------------


def test_the_default_policy_changes_nothing() -> None:
    assert Policy().to_dict() == {
        "secrets": "off",
        "personal_data": False,
        "patterns": {},
        "max_file_bytes": 102_400,
        "max_vault_bytes": None,
        "max_files": None,
        "expire_after": None,
        "sync_remote": None,
        "sync_every": None,
        "content_retention": None,
        "require_signatures": False,
        "checkpoint_every": None,
    }


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"secrets": "maybe"}, "secrets must be one of off, redact, refuse, not 'maybe'"),
        ({"secrets": None}, "secrets must be one of"),
        ({"personal_data": "yes"}, "personal_data must be true or false"),
        ({"personal_data": 1}, "personal_data must be true or false"),
        ({"patterns": ["TS-1"]}, "patterns must map a kind name"),
        ({"patterns": {"Ticket": "TS-1"}}, "pattern kind 'Ticket' must be lowercase"),
        ({"patterns": {"1ticket": "TS-1"}}, "pattern kind '1ticket'"),
        ({"patterns": {"t" * 41: "TS-1"}}, "at most 40"),
        ({"patterns": {"ticket": "TS-("}}, "the pattern for 'ticket' is not a valid regular expression"),
        ({"patterns": {"ticket": "x*"}}, "the pattern for 'ticket' matches empty text"),
        ({"patterns": {"ticket": ""}}, "must be a non-empty regular expression"),
        ({"patterns": {"ticket": 7}}, "must be a non-empty regular expression"),
        ({"max_file_bytes": 0}, "max_file_bytes must be a whole number of at least 1."),
        ({"max_file_bytes": None}, "max_file_bytes must be a whole number of at least 1."),
        ({"max_file_bytes": 10.0}, "max_file_bytes must be a whole number"),
        ({"max_vault_bytes": -1}, "max_vault_bytes must be a whole number of at least 1 or null."),
        ({"max_files": True}, "max_files must be a whole number of at least 1 or null."),
        ({"max_files": "5"}, "max_files must be a whole number"),
        ({"expire_after": 0}, "expire_after must be a whole number of at least 1 or null."),
        ({"expire_after": "30d"}, "expire_after must be a whole number"),
    ],
)
def test_a_bad_policy_value_is_refused_with_its_name(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(VaultError) as info:
        Policy(**fields)
    assert str(info.value).startswith("Error: ")
    assert words in str(info.value)


def test_a_pattern_kind_of_40_characters_is_accepted() -> None:
    assert list(Policy(patterns={"t" * 40: "TS-1"}).patterns) == ["t" * 40]


def test_from_dict_refuses_unknown_fields_and_non_objects() -> None:
    with pytest.raises(VaultError, match=r"^Error: unknown policy fields: colour, size\.$"):
        Policy.from_dict({"secrets": "off", "size": 1, "colour": "red"})
    with pytest.raises(VaultError, match="a policy is a JSON object"):
        Policy.from_dict(["secrets"])  # type: ignore[arg-type]


def test_with_changes_keeps_the_other_fields_and_reads_durations() -> None:
    base = Policy(secrets="refuse", max_files=10)
    changed = base.with_changes({"expire_after": "30d", "max_vault_bytes": 5000})
    assert changed == Policy(secrets="refuse", max_files=10, expire_after=30 * 86400, max_vault_bytes=5000)
    assert base.with_changes({"expire_after": timedelta(hours=12)}).expire_after == 43200
    assert base.with_changes({"expire_after": 90}).expire_after == 90
    assert base == Policy(secrets="refuse", max_files=10)  # frozen: the original is untouched
    with pytest.raises(VaultError):
        base.with_changes({"max_files": 0})
    with pytest.raises(VaultError, match="unknown policy field"):
        base.with_changes({"secret": "off"})


def test_changed_fields_names_exactly_what_differs_in_field_order() -> None:
    a = Policy()
    b = Policy(expire_after=60, secrets="redact", patterns=TICKET)
    assert b.changed_fields(a) == ["secrets", "patterns", "expire_after"]
    assert a.changed_fields(a) == []


def test_a_policy_is_frozen_hashable_and_round_trips_through_its_bytes() -> None:
    policy = Policy(secrets="redact", personal_data=True, patterns={"zz": "ZZ-1", "aa": "AA-1"}, max_files=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.secrets = "off"  # type: ignore[misc]
    data = policy.to_bytes()
    assert data.endswith(b"}\n")
    parsed = json.loads(data)
    assert list(parsed) == sorted(parsed)  # sorted keys: stable diffs in git
    assert list(parsed["patterns"]) == ["aa", "zz"]
    assert Policy.from_dict(parsed) == policy
    assert {policy, Policy.from_dict(parsed)} == {policy}


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("30d", 2_592_000),
        ("12h", 43_200),
        ("90m", 5_400),
        ("45s", 45),
        ("2w", 1_209_600),
        ("45", 45),
        (" 3D ", 259_200),
        (7, 7),
        (timedelta(days=1), 86_400),
    ],
)
def test_parse_duration_reads_every_documented_form(given: object, seconds: int) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize("given", ["", "soon", "30x", "1.5d", "-3d", "0d", 0, -5, True, 1.5, None, timedelta(0)])
def test_parse_duration_refuses_what_is_not_a_duration(given: object) -> None:
    with pytest.raises(VaultError) as info:
        parse_duration(given)
    assert str(info.value).startswith("Error: ")


@pytest.mark.parametrize(
    ("seconds", "shown"), [(2_592_000, "30d"), (1_209_600, "2w"), (43_200, "12h"), (5_400, "90m"), (45, "45s")]
)
def test_format_duration_uses_the_largest_whole_unit(seconds: int, shown: str) -> None:
    assert format_duration(seconds) == shown
    assert parse_duration(shown) == seconds


# -- storage on the policy branch ----------------------------------------------------


def test_a_new_vault_has_the_default_policy_and_no_policy_branch(vault: Vault, vault_path: Path) -> None:
    assert vault.policy == Policy()
    assert vault.policy_history() == []
    assert policy_tip(vault_path) == ""


def test_set_policy_is_one_sealed_commit_on_its_own_branch(vault: Vault, vault_path: Path, clock: FakeClock) -> None:
    new = vault.set_policy(actor="ops", session="change-7", secrets="redact", max_files=3, expire_after="30d")
    assert new == Policy(secrets="redact", max_files=3, expire_after=2_592_000)
    assert vault.policy == new
    assert policy_commits(vault_path) == 1
    raw = git(vault_path, "cat-file", "commit", POLICY_REF)
    headers, _, message = raw.partition("\n\n")
    assert message == (
        'policy: secrets="redact", max_files=3, expire_after=2592000\n\n'
        "Vaultmem-Command: policy\n"
        "Vaultmem-Policy-Changed: secrets, max_files, expire_after\n"
        "Vaultmem-Actor: ops\n"
        "Vaultmem-Session: change-7\n"
    )
    assert re.search(r"^vaultmem-seal \S+ \S+$", headers, re.M), headers
    assert "\nparent " not in headers
    who = git(vault_path, "log", "-1", "--format=%an|%ae|%cn|%ce|%at", POLICY_REF).strip()
    assert who == f"ops|ops|vaultmem|vaultmem@localhost|{int(clock.now)}"
    assert git(vault_path, "ls-tree", "--name-only", POLICY_REF).splitlines() == ["policy.json"]
    stored = git(vault_path, "show", f"{POLICY_REF}:policy.json")
    assert stored.encode() == new.to_bytes()


def test_a_change_without_a_session_has_no_session_trailer(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_files=9)
    message = git(vault_path, "cat-file", "commit", POLICY_REF).partition("\n\n")[2]
    assert message == (
        "policy: max_files=9\n\nVaultmem-Command: policy\nVaultmem-Policy-Changed: max_files\nVaultmem-Actor: ops\n"
    )


def test_each_change_is_a_child_of_the_previous_one_and_history_is_newest_first(
    vault: Vault, vault_path: Path, clock: FakeClock
) -> None:
    start = clock.now
    vault.set_policy(actor="ops", session="s1", secrets="refuse")
    first = policy_tip(vault_path)
    clock.advance(3600)
    vault.set_policy(actor="alice", max_files=5, patterns=TICKET)
    second = policy_tip(vault_path)
    clock.advance(60)
    vault.set_policy(Policy(secrets="refuse", max_files=5, patterns=TICKET, personal_data=True), actor="bob")
    third = policy_tip(vault_path)
    assert git(vault_path, "rev-parse", f"{third}^").strip() == second
    assert git(vault_path, "rev-parse", f"{second}^").strip() == first
    history = vault.policy_history()
    assert [v.id for v in history] == [third, second, first]
    assert [v.actor for v in history] == ["bob", "alice", "ops"]
    assert [v.session for v in history] == [None, None, "s1"]
    assert [v.changed for v in history] == [("personal_data",), ("patterns", "max_files"), ("secrets",)]
    assert [v.time for v in history] == [datetime.fromtimestamp(start + s, tz=timezone.utc) for s in (3660, 3600, 0)]
    assert history[2].policy == Policy(secrets="refuse")
    assert history[1].policy == Policy(secrets="refuse", max_files=5, patterns=TICKET)
    assert history[0].policy == vault.policy
    assert [v.id for v in vault.policy_history(limit=2)] == [third, second]
    assert [v.id for v in vault.policy_history(limit=1)] == [third]


def test_a_change_that_changes_nothing_makes_no_commit(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", secrets="refuse", max_files=5)
    tip = policy_tip(vault_path)
    assert vault.set_policy(actor="ops", secrets="refuse") == Policy(secrets="refuse", max_files=5)
    assert vault.set_policy(actor="ops", max_files=5, secrets="refuse") == Policy(secrets="refuse", max_files=5)
    assert vault.set_policy(Policy(secrets="refuse", max_files=5), actor="other") == vault.policy
    assert vault.set_policy(actor="ops") == vault.policy
    assert policy_tip(vault_path) == tip
    assert policy_commits(vault_path) == 1


def test_a_new_vault_setting_the_defaults_makes_no_commit(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(Policy(), actor="ops")
    vault.set_policy(actor="ops", secrets="off", max_file_bytes=102_400)
    assert policy_tip(vault_path) == ""


def test_set_policy_refuses_a_whole_policy_and_fields_together(vault: Vault, vault_path: Path) -> None:
    with pytest.raises(VaultError, match="either a whole policy or fields to change, not both"):
        vault.set_policy(Policy(secrets="refuse"), actor="ops", max_files=3)
    with pytest.raises(VaultError, match=r"policy must be a vaultmem\.Policy"):
        vault.set_policy({"secrets": "refuse"}, actor="ops")  # type: ignore[arg-type]
    with pytest.raises(VaultError, match="secrets must be one of"):
        vault.set_policy(actor="ops", secrets="sometimes")
    with pytest.raises(VaultError, match="unknown policy field"):
        vault.set_policy(actor="ops", max_file_size=3)
    with pytest.raises(VaultError):
        vault.set_policy(actor="bad\nactor", secrets="refuse")
    assert policy_tip(vault_path) == ""
    assert vault.policy == Policy()


def test_git_log_p_on_the_policy_branch_shows_json_diffs(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_files=3)
    vault.set_policy(actor="ops", max_files=5, secrets="redact")
    log = git(vault_path, "log", "-p", "vaultmem-policy")
    newest = log.split("\ncommit ")[0]
    assert 'policy: secrets="redact", max_files=5' in newest
    assert "Vaultmem-Policy-Changed: secrets, max_files" in newest
    assert '-  "max_files": 3,\n+  "max_files": 5,' in newest
    assert '-  "secrets": "off",\n+  "secrets": "redact",' in newest
    assert "new file mode" in log.split("\ncommit ")[1]
    assert '+  "max_files": 3,' in log.split("\ncommit ")[1]


def test_git_fsck_strict_is_clean_after_policy_changes(vault: Vault, vault_path: Path, call: Any) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse", patterns=TICKET)
    vault.set_policy(actor="ops", max_files=100)
    result = fsck(vault_path)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "error" not in (result.stderr + result.stdout).lower()


def test_policy_changes_never_touch_main(vault: Vault, vault_path: Path, call: Any) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    with unchanged(vault, vault_path):
        vault.set_policy(actor="ops", secrets="refuse")
        vault.set_policy(actor="ops", max_files=2, expire_after="1d")
    assert "policy" not in git(vault_path, "log", "--format=%B", "main")
    assert policy_commits(vault_path) == 2
    assert vault.verify().ok


def test_a_vault_without_memory_commits_can_hold_a_policy(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", secrets="refuse")
    assert commit_count(vault_path) == 0
    assert vault.history() == []
    assert vault.verify().ok


def test_the_policy_is_read_by_another_opening_and_travels_with_a_clone(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, call: Any
) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse", max_files=7)
    assert Vault.open(vault_path, key=key).policy == Policy(secrets="refuse", max_files=7)
    clone = tmp_path / "clone.vault"
    subprocess.run(["git", "clone", "--quiet", "--mirror", str(vault_path), str(clone)], check=True)
    copy = Vault.open(clone, key=key)
    assert copy.policy == Policy(secrets="refuse", max_files=7)
    assert [v.actor for v in copy.policy_history()] == ["ops"]


def test_verify_of_a_vault_with_a_policy_is_clean(vault: Vault, call: Any) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="redact")
    vault.set_policy(actor="ops", max_vault_bytes=10_000)
    report = vault.verify()
    assert report.ok, report.problems
    assert report.commits == 1


# -- tampering: the seal ------------------------------------------------------------------


def _unsealed_commit_on_top(vault_path: Path) -> str:
    """A new policy commit saying secrets=off, made with pygit2 (no key: no seal)."""
    repo = pygit2.Repository(str(vault_path))
    tip = repo.references[POLICY_REF].peel(pygit2.Commit)
    doc = json.loads(tip.tree["policy.json"].read_raw())
    doc["secrets"] = "off"
    blob = repo.create_blob((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    builder = repo.TreeBuilder()
    builder.insert("policy.json", blob, BLOB)
    message = 'policy: secrets="off"\n\nVaultmem-Command: policy\nVaultmem-Policy-Changed: secrets\n'
    commit = repo.create_commit(None, tip.author, tip.committer, message, builder.write(), [tip.id])
    repo.references.create(POLICY_REF, commit, force=True)
    return str(commit)


def _sealed_commit_with_other_json(vault_path: Path) -> str:
    """The tip's exact bytes, its seal kept, but a tree whose policy.json says secrets=off."""
    repo = pygit2.Repository(str(vault_path))
    tip = repo.references[POLICY_REF].peel(pygit2.Commit)
    doc = json.loads(tip.tree["policy.json"].read_raw())
    doc["secrets"] = "off"
    blob = repo.create_blob((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    builder = repo.TreeBuilder()
    builder.insert("policy.json", blob, BLOB)
    tree = builder.write()
    raw = bytes(repo.odb.read(tip.id)[1])
    assert b"\nvaultmem-seal " in raw
    forged = re.sub(rb"^tree [0-9a-f]{40}", b"tree " + str(tree).encode(), raw)
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, forged)
    repo.references.create(POLICY_REF, oid, force=True)
    return str(oid)


def _rewritten_by_stock_git(vault_path: Path) -> str:
    """The tip rewritten with the stock git binary: another author, seal copied."""
    raw = git(vault_path, "cat-file", "commit", POLICY_REF)
    forged = re.sub(r"^author ops <ops>", "author mallory <mallory>", raw, flags=re.M)
    forged = forged.replace("Vaultmem-Actor: ops", "Vaultmem-Actor: mallory")
    assert forged != raw
    oid = subprocess.run(
        ["git", "-C", str(vault_path), "hash-object", "-t", "commit", "-w", "--stdin"],
        input=forged,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(vault_path, "update-ref", POLICY_REF, oid)
    return oid


def _ref_at_a_blob(vault_path: Path) -> str:
    repo = pygit2.Repository(str(vault_path))
    blob = repo.create_blob(Policy().to_bytes())
    repo.references.create(POLICY_REF, blob, force=True)
    return str(blob)


TAMPERS = {
    "unsealed-on-top": _unsealed_commit_on_top,
    "sealed-other-json": _sealed_commit_with_other_json,
    "stock-git-author": _rewritten_by_stock_git,
    "ref-at-blob": _ref_at_a_blob,
}


@pytest.fixture(params=sorted(TAMPERS))
def tampered(request: pytest.FixtureRequest, vault: Vault, vault_path: Path, call: Any) -> str:
    """A vault holding a.txt whose refusing policy was then altered without the key; the forged id."""
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse")
    forged: str = TAMPERS[request.param](vault_path)
    assert policy_tip(vault_path) == forged
    return forged


def test_a_tampered_policy_fails_to_load(vault: Vault, vault_path: Path, key: str, tampered: str) -> None:
    for opened in (vault, Vault.open(vault_path, key=key)):
        with pytest.raises(IntegrityError) as info:
            _ = opened.policy
        message = str(info.value)
        assert message.startswith(f"Error: the vault's policy (commit {tampered}) ")
        assert "run `vaultmem verify`" in message
        with pytest.raises(IntegrityError):
            opened.policy_history()


def test_a_forged_seal_is_named_as_a_failed_seal(vault: Vault, vault_path: Path, call: Any) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse")
    forged = _sealed_commit_with_other_json(vault_path)
    with pytest.raises(IntegrityError, match=rf"policy \(commit {forged}\) failed its seal"):
        _ = vault.policy
    unsealed = _unsealed_commit_on_top(vault_path)
    with pytest.raises(IntegrityError, match=rf"policy \(commit {unsealed}\) failed its seal: it carries no seal"):
        _ = vault.policy


def test_verify_reports_a_tampered_policy_as_one_policy_finding(vault: Vault, tampered: str) -> None:
    report = vault.verify()
    assert [f.kind for f in report.findings] == ["policy"], report.problems
    assert not report.ok
    assert tampered in str(report.findings[0])
    assert "\n" not in str(report.findings[0])
    assert report.commits == 1  # main itself is fine and still checked


def test_claudes_writes_are_refused_while_the_policy_is_damaged(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, tampered: str
) -> None:
    with unchanged(vault, vault_path):
        for params in (
            {"command": "create", "path": "/memories/b.txt", "file_text": "bravo\n"},
            {"command": "str_replace", "path": "/memories/a.txt", "old_str": "alpha", "new_str": "omega"},
            {"command": "insert", "path": "/memories/a.txt", "insert_line": 0, "insert_text": "zero\n"},
            {"command": "rename", "old_path": "/memories/a.txt", "new_path": "/memories/c.txt"},
        ):
            message = refused(tool, **params)
            assert message.startswith(f"Error: the vault's policy (commit {tampered}) "), message
            assert "Writes are refused" in message
    # Reading is still allowed.
    assert "alpha" in tool.call({"command": "view", "path": "/memories/a.txt"})


def test_a_delete_is_refused_while_the_policy_is_damaged(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, call: Any
) -> None:
    """The policy module: a policy edited without the key fails to load "(the vault then refuses writes)"."""
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse")
    forged = _unsealed_commit_on_top(vault_path)
    with unchanged(vault, vault_path):
        message = refused(tool, command="delete", path="/memories/a.txt")
        assert message.startswith(f"Error: the vault's policy (commit {forged}) ")


def test_an_import_is_refused_while_the_policy_is_damaged(
    vault: Vault, vault_path: Path, tampered: str, tmp_path: Path
) -> None:
    source = sdk_memories(tmp_path / "sdk", {"b.txt": "bravo\n"})
    with unchanged(vault, vault_path), pytest.raises(IntegrityError):
        vault.import_folder(source)


def test_an_operator_with_the_key_can_set_the_policy_again_after_tampering(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, call: Any
) -> None:
    """The refusal says: "Writes are refused until an operator sets the policy again with the key"."""
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    vault.set_policy(actor="ops", secrets="refuse")
    _unsealed_commit_on_top(vault_path)
    with pytest.raises(IntegrityError):
        _ = vault.policy
    assert vault.set_policy(Policy(secrets="refuse"), actor="ops") == Policy(secrets="refuse")
    assert vault.policy == Policy(secrets="refuse")
    assert create(tool, "/memories/b.txt", "bravo\n") == "File created successfully at: /memories/b.txt"


# -- the application's overrides ------------------------------------------------------


def test_a_dict_override_changes_only_its_fields_for_that_tool(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_files=2, patterns=TICKET)
    strict = VaultMemoryTool(vault, actor="bot", session="s", policy={"secrets": "refuse"})
    assert strict.commands.guard.policy() == Policy(secrets="refuse", max_files=2, patterns=TICKET)
    plain = VaultMemoryTool(vault, actor="bot", session="s")
    assert create(plain, "/memories/a.txt", "ticket TS-123456\n") == "File created successfully at: /memories/a.txt"
    with unchanged(vault, vault_path):
        assert refused(strict, command="create", path="/memories/b.txt", file_text="ticket TS-654321\n") == (
            REFUSED_TEXT.format(what="a ticket_secret value")
        )
    assert create(strict, "/memories/b.txt", "no ticket\n") == "File created successfully at: /memories/b.txt"
    with unchanged(vault, vault_path):  # the vault's max_files still applies to the strict tool
        assert refused(strict, command="create", path="/memories/c.txt", file_text="c\n") == too_many_files(2, 2)


def test_a_whole_policy_override_replaces_the_vaults(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_files=1, secrets="refuse")
    free = VaultMemoryTool(vault, actor="bot", session="s", policy=Policy())
    for name in ("a", "b", "c"):
        create(free, f"/memories/{name}.txt", f"key {ANTHROPIC_KEY}\n")
    assert files_of(vault)["/memories/c.txt"] == f"key {ANTHROPIC_KEY}\n"
    assert free.commands.guard.policy() == Policy()


def test_an_explicit_max_file_bytes_overrides_vault_and_app_policy(vault: Vault, vault_path: Path) -> None:
    vault.set_policy(actor="ops", max_file_bytes=5)
    assert VaultMemoryTool(vault, actor="bot").commands.max_file_bytes == 5
    assert VaultMemoryTool(vault, actor="bot", policy={"max_file_bytes": 8}).commands.max_file_bytes == 8
    assert VaultMemoryTool(vault, actor="bot", policy=Policy(max_file_bytes=9)).commands.max_file_bytes == 9
    wide = VaultMemoryTool(vault, actor="bot", policy={"max_file_bytes": 8}, max_file_bytes=20)
    assert wide.commands.max_file_bytes == 20
    assert create(wide, "/memories/a.txt", "x" * 20) == "File created successfully at: /memories/a.txt"
    with unchanged(vault, vault_path):
        assert refused(wide, command="create", path="/memories/b.txt", file_text="x" * 21).startswith(
            "Error: File /memories/b.txt would be 21 bytes; the limit is 20 bytes per file."
        )


def test_the_stored_policy_is_read_fresh_on_each_write(vault: Vault, vault_path: Path, key: str) -> None:
    tool = VaultMemoryTool(vault, actor="bot", session="s", policy={"patterns": TICKET})
    assert create(tool, "/memories/a.txt", "TS-000001\n") == "File created successfully at: /memories/a.txt"
    operator = Vault.open(vault_path, key=key)  # another opening, as the CLI would be
    operator.set_policy(actor="ops", secrets="refuse")
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/b.txt", file_text="TS-000002\n") == (
            REFUSED_TEXT.format(what="a ticket_secret value")
        )
    operator.set_policy(actor="ops", secrets="off")
    assert create(tool, "/memories/b.txt", "TS-000002\n") == "File created successfully at: /memories/b.txt"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": {"secrets": "nope"}},
        {"policy": {"colour": "red"}},
        {"policy": {"max_files": 0}},
        {"policy": {"patterns": {"Bad": "x"}}},
        {"policy": "refuse"},
        {"policy": ["secrets"]},
        {"max_file_bytes": 0},
        {"max_file_bytes": True},
    ],
)
def test_a_bad_override_is_refused_when_the_tool_is_made(vault: Vault, kwargs: dict[str, Any]) -> None:
    with pytest.raises(VaultError):
        VaultMemoryTool(vault, actor="bot", **kwargs)


# -- the secrets filter on Claude's writes -----------------------------------------------


def _tool(vault: Vault, **policy: Any) -> VaultMemoryTool:
    return VaultMemoryTool(vault, actor="bot", session="s-1", policy=policy)


def test_redact_replaces_each_secret_in_a_create_and_says_so(vault: Vault, vault_path: Path) -> None:
    tool = _tool(vault, secrets="redact")
    text = f"Billing: key {ANTHROPIC_KEY}, card {CARD}.\n"
    result = create(tool, "/memories/billing.md", text)
    assert result == "File created successfully at: /memories/billing.md" + NOTE.format(
        what="an Anthropic API key and a card number",
        marks="[REDACTED:anthropic_api_key], [REDACTED:card_number]",
    )
    assert vault.read("/memories/billing.md") == (
        "Billing: key [REDACTED:anthropic_api_key], card [REDACTED:card_number].\n"
    )
    assert ANTHROPIC_KEY not in all_versions_text(vault)
    assert ANTHROPIC_KEY not in git(vault_path, "log", "--format=%B", "main")


def test_redact_counts_repeated_kinds_and_lists_each_mark_once(vault: Vault) -> None:
    tool = _tool(vault, secrets="redact")
    result = create(tool, "/memories/cards.txt", f"{CARD} and 5500 0000 0000 0004\n")
    assert result.endswith(NOTE.format(what="2 card numbers", marks="[REDACTED:card_number]"))
    assert vault.read("/memories/cards.txt") == "[REDACTED:card_number] and [REDACTED:card_number]\n"


def test_redact_applies_to_str_replace_new_text(vault: Vault) -> None:
    tool = _tool(vault, secrets="redact")
    create(tool, "/memories/a.txt", "line one\ntoken: TBD\nline three\n")
    result = tool.call(
        {"command": "str_replace", "path": "/memories/a.txt", "old_str": "TBD", "new_str": f"{ANTHROPIC_KEY}"}
    )
    assert result == (
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
        "     1\tline one\n     2\ttoken: [REDACTED:anthropic_api_key]\n     3\tline three"
        + NOTE.format(what="an Anthropic API key", marks="[REDACTED:anthropic_api_key]")
    )
    assert vault.read("/memories/a.txt") == "line one\ntoken: [REDACTED:anthropic_api_key]\nline three\n"


def test_redact_applies_to_insert_text(vault: Vault) -> None:
    tool = _tool(vault, secrets="redact")
    create(tool, "/memories/a.txt", "first\n")
    result = tool.call(
        {"command": "insert", "path": "/memories/a.txt", "insert_line": 1, "insert_text": f"card {CARD}\n"}
    )
    assert result == "The file /memories/a.txt has been edited." + NOTE.format(
        what="a card number", marks="[REDACTED:card_number]"
    )
    assert vault.read("/memories/a.txt") == "first\ncard [REDACTED:card_number]\n"


def test_a_clean_write_under_redact_gets_no_note(vault: Vault) -> None:
    tool = _tool(vault, secrets="redact")
    assert create(tool, "/memories/a.txt", "Acme prefers e-mail.\n") == "File created successfully at: /memories/a.txt"


@pytest.mark.parametrize(
    ("params", "what"),
    [
        (
            {"command": "create", "path": "/memories/new.txt", "file_text": f"key {ANTHROPIC_KEY}\n"},
            "an Anthropic API key",
        ),
        ({"command": "str_replace", "path": "/memories/a.txt", "old_str": "alpha", "new_str": CARD}, "a card number"),
        (
            {"command": "insert", "path": "/memories/a.txt", "insert_line": 0, "insert_text": f"{CARD}\n"},
            "a card number",
        ),
    ],
)
def test_refuse_writes_nothing_and_names_what_it_found(
    vault: Vault, vault_path: Path, params: dict[str, Any], what: str
) -> None:
    create(_tool(vault), "/memories/a.txt", "alpha\n")
    tool = _tool(vault, secrets="refuse")
    with unchanged(vault, vault_path):
        assert refused(tool, **params) == REFUSED_TEXT.format(what=what)
    assert "/memories/new.txt" not in vault.reads.load()


def test_refuse_describes_several_kinds_in_order(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="bot", policy={"secrets": "refuse", "patterns": TICKET})
    with unchanged(vault, vault_path):
        message = refused(
            tool, command="create", path="/memories/x.txt", file_text=f"TS-123456 then {ANTHROPIC_KEY} and {CARD}"
        )
    assert message == REFUSED_TEXT.format(what="a ticket_secret value, an Anthropic API key and a card number")
    assert ANTHROPIC_KEY not in message and CARD not in message and "TS-123456" not in message


def test_refuse_scans_only_the_new_text(vault: Vault) -> None:
    create(_tool(vault), "/memories/a.txt", f"old card {CARD}\nstatus: open\n")
    tool = _tool(vault, secrets="refuse")
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "open", "new_str": "closed"})
    assert vault.read("/memories/a.txt") == f"old card {CARD}\nstatus: closed\n"


def test_off_stores_secrets_as_written(vault: Vault) -> None:
    tool = _tool(vault)
    assert create(tool, "/memories/a.txt", f"{ANTHROPIC_KEY} {CARD}\n") == (
        "File created successfully at: /memories/a.txt"
    )
    assert vault.read("/memories/a.txt") == f"{ANTHROPIC_KEY} {CARD}\n"


def test_personal_data_is_found_only_when_the_policy_asks(vault: Vault) -> None:
    text = "Contact jane.doe@acmecorp.io or +44 7700 900123.\n"
    plain = _tool(vault, secrets="redact")
    assert create(plain, "/memories/a.txt", text) == "File created successfully at: /memories/a.txt"
    assert vault.read("/memories/a.txt") == text
    personal = _tool(vault, secrets="redact", personal_data=True)
    result = create(personal, "/memories/b.txt", text)
    assert result.endswith(
        NOTE.format(what="an e-mail address and a phone number", marks="[REDACTED:email], [REDACTED:phone]")
    )
    assert vault.read("/memories/b.txt") == "Contact [REDACTED:email] or [REDACTED:phone].\n"


def test_policy_patterns_are_detectors_of_their_own_kind(vault: Vault) -> None:
    vault.set_policy(actor="ops", secrets="redact", patterns=TICKET)
    tool = VaultMemoryTool(vault, actor="bot")
    result = create(tool, "/memories/t.txt", "Door code ticket TS-123456, not TS-12345.\n")
    assert result.endswith(NOTE.format(what="a ticket_secret value", marks="[REDACTED:ticket_secret]"))
    assert vault.read("/memories/t.txt") == "Door code ticket [REDACTED:ticket_secret], not TS-12345.\n"


class EmployeeIds:
    """An application's own detector: ``EMP-`` and five digits."""

    kind = "employee_id"

    def find(self, text: str) -> Iterable[Any]:
        from vaultmem.core.detectors import Match

        return [Match(self.kind, m.start(), m.end()) for m in re.finditer(r"EMP-[0-9]{5}", text)]


def test_application_detectors_join_the_filter(vault: Vault, vault_path: Path) -> None:
    from vaultmem.core.detectors import RegexDetector

    tool = VaultMemoryTool(
        vault,
        actor="bot",
        policy={"secrets": "redact"},
        detectors=[EmployeeIds(), RegexDetector("badge", r"BADGE#[0-9]{4}")],
    )
    result = create(tool, "/memories/hr.txt", "EMP-12345 holds BADGE#0042.\n")
    assert result.endswith(
        NOTE.format(what="an employee_id value and a badge value", marks="[REDACTED:badge], [REDACTED:employee_id]")
    )
    assert vault.read("/memories/hr.txt") == "[REDACTED:employee_id] holds [REDACTED:badge].\n"
    refusing = VaultMemoryTool(vault, actor="bot", policy={"secrets": "refuse"}, detectors=[EmployeeIds()])
    with unchanged(vault, vault_path):
        assert refused(refusing, command="create", path="/memories/x.txt", file_text="EMP-54321") == (
            REFUSED_TEXT.format(what="an employee_id value")
        )


def test_a_bad_application_detector_is_refused(vault: Vault) -> None:
    with pytest.raises(VaultError, match=r"^Error: .* is not a detector"):  # when the tool is made, not at a write
        VaultMemoryTool(vault, actor="bot", policy={"secrets": "redact"}, detectors=[object()])  # type: ignore[list-item]
    assert vault.listing() == []


@pytest.mark.parametrize("mode", ["redact", "refuse"])
def test_a_create_path_holding_a_secret_is_refused_even_under_redact(vault: Vault, vault_path: Path, mode: str) -> None:
    tool = _tool(vault, secrets=mode)
    path = f"/memories/keys/{ANTHROPIC_KEY}.txt"
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path=path, file_text="hello\n") == REFUSED_PATH.format(
            path=path, what="an Anthropic API key"
        )
    assert not any(ANTHROPIC_KEY in p for p in vault.reads.load())


@pytest.mark.parametrize("mode", ["redact", "refuse"])
def test_a_rename_destination_holding_a_secret_is_refused(vault: Vault, vault_path: Path, mode: str) -> None:
    create(_tool(vault), "/memories/a.txt", "alpha\n")
    tool = _tool(vault, secrets=mode)
    for path, what in (
        (f"/memories/moved/{ANTHROPIC_KEY}.txt", "an Anthropic API key"),
        (f"/memories/card {CARD}.txt", "a card number"),
    ):
        with unchanged(vault, vault_path):
            assert refused(tool, command="rename", old_path="/memories/a.txt", new_path=path) == (
                REFUSED_PATH.format(path=path, what=what)
            )


def test_a_rename_checks_source_and_destination_before_the_path_filter(vault: Vault, vault_path: Path) -> None:
    plain = _tool(vault)
    create(plain, "/memories/a.txt", "alpha\n")
    secret_path = f"/memories/{ANTHROPIC_KEY}.txt"
    create(plain, secret_path, "made while the filter was off\n")
    tool = _tool(vault, secrets="refuse")
    with unchanged(vault, vault_path):
        assert refused(tool, command="rename", old_path="/memories/nope.txt", new_path=f"/memories/x{CARD}") == (
            "Error: The path /memories/nope.txt does not exist"
        )
        assert refused(tool, command="rename", old_path="/memories/a.txt", new_path=secret_path) == (
            f"Error: The destination {secret_path} already exists"
        )
    # Renaming a file away from a secret name is allowed: only the destination is checked.
    tool.call({"command": "rename", "old_path": secret_path, "new_path": "/memories/b.txt"})
    assert sorted(files_of(vault)) == ["/memories/a.txt", "/memories/b.txt"]


def test_under_off_a_path_with_a_secret_is_accepted(vault: Vault) -> None:
    tool = _tool(vault)
    path = f"/memories/{ANTHROPIC_KEY}.txt"
    assert create(tool, path, "x\n") == f"File created successfully at: {path}"


# -- quotas ----------------------------------------------------------------------------


def test_max_files_refuses_a_new_file_when_full(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> None:
    vault.set_policy(actor="ops", max_files=3)
    for path in ("/memories/a.txt", "/memories/dir/b.txt", "/memories/dir/deep/c.txt"):
        create(tool, path, "x\n")
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/d.txt", file_text="d\n") == too_many_files(3, 3)
        assert refused(tool, command="create", path="/memories/dir/e.txt", file_text="") == too_many_files(3, 3)
    # Editing the files already there is fine.
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "x", "new_str": "y"})
    tool.call({"command": "insert", "path": "/memories/a.txt", "insert_line": 0, "insert_text": "top\n"})
    tool.call({"command": "delete", "path": "/memories/dir/deep"})
    assert create(tool, "/memories/d.txt", "d\n") == "File created successfully at: /memories/d.txt"
    assert len(files_of(vault)) == 3


def test_max_files_message_uses_thousands_separators(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    vault.import_folder(sdk_memories(tmp_path / "sdk", {f"f{i:04}.txt": "" for i in range(1000)}))
    vault.set_policy(actor="ops", max_files=1000)
    tool = VaultMemoryTool(vault, actor="bot")
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/x.txt", file_text="") == too_many_files(1000, 1000)


def test_max_vault_bytes_refuses_a_create_that_would_go_over(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    vault.set_policy(actor="ops", max_vault_bytes=1000)
    create(tool, "/memories/a.txt", "a" * 600)
    create(tool, "/memories/b.txt", "é" * 195)  # 390 bytes of UTF-8
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/c.txt", file_text="c" * 11) == (
            too_many_bytes(1001, 1000, 990)
        )
        assert refused(tool, command="create", path="/memories/c.txt", file_text="é" * 6) == (
            too_many_bytes(1002, 1000, 990)
        )
    assert create(tool, "/memories/c.txt", "c" * 10) == "File created successfully at: /memories/c.txt"
    assert sum(e.size for e in vault.listing() if e.kind == "file") == 1000


def test_max_vault_bytes_refuses_growing_edits(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> None:
    create(tool, "/memories/a.txt", "alpha\n")  # 6
    create(tool, "/memories/b.txt", "b" * 90)  # 90
    vault.set_policy(actor="ops", max_vault_bytes=100)
    with unchanged(vault, vault_path):
        assert refused(
            tool, command="str_replace", path="/memories/a.txt", old_str="alpha", new_str="alphabet!!"
        ) == too_many_bytes(101, 100, 96)
        assert refused(
            tool, command="insert", path="/memories/a.txt", insert_line=1, insert_text="12345\n"
        ) == too_many_bytes(102, 100, 96)
    tool.call({"command": "insert", "path": "/memories/a.txt", "insert_line": 1, "insert_text": "123\n"})
    assert vault.read("/memories/a.txt") == "alpha\n123\n"


def test_edits_that_shrink_or_keep_the_size_are_allowed_over_the_limit(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    create(tool, "/memories/a.txt", "a" * 500)
    create(tool, "/memories/b.txt", "start:" + "b" * 494)
    vault.set_policy(actor="ops", max_vault_bytes=100, max_files=1)  # lowered below what the memory holds
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "a" * 500, "new_str": "short"})
    tool.call({"command": "str_replace", "path": "/memories/b.txt", "old_str": "start:", "new_str": "begin:"})
    assert vault.read("/memories/b.txt") == "begin:" + "b" * 494
    assert vault.read("/memories/a.txt") == "short"
    with unchanged(vault, vault_path):
        assert refused(tool, command="str_replace", path="/memories/a.txt", old_str="short", new_str="shorts") == (
            too_many_bytes(506, 100, 505)
        )


def test_rename_and_delete_are_never_refused_by_quotas(vault: Vault, tool: VaultMemoryTool) -> None:
    for name in ("a", "b", "c"):
        create(tool, f"/memories/{name}.txt", name * 100)
    vault.set_policy(actor="ops", max_files=1, max_vault_bytes=10)
    assert tool.call({"command": "rename", "old_path": "/memories/a.txt", "new_path": "/memories/x/a.txt"}) == (
        "Successfully renamed /memories/a.txt to /memories/x/a.txt"
    )
    assert tool.call({"command": "rename", "old_path": "/memories/x", "new_path": "/memories/y"}) == (
        "Successfully renamed /memories/x to /memories/y"
    )
    assert tool.call({"command": "delete", "path": "/memories/b.txt"}) == "Successfully deleted /memories/b.txt"
    assert sorted(files_of(vault)) == ["/memories/c.txt", "/memories/y/a.txt"]


def test_restore_and_undo_are_not_limited_by_quotas(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> None:
    for name in ("a", "b", "c"):
        create(tool, f"/memories/{name}.txt", name * 100)
    full = vault.history(limit=1)[0]
    vault.set_policy(actor="ops", max_files=2, max_vault_bytes=250)
    tool.call({"command": "delete", "path": "/memories/c.txt"})
    assert vault.undo(actor="ops") is not None
    assert sorted(files_of(vault)) == ["/memories/a.txt", "/memories/b.txt", "/memories/c.txt"]
    tool.call({"command": "delete", "path": "/memories/c.txt"})
    assert vault.restore(full.id, actor="ops") is not None
    assert files_of(vault) == files_of(vault, at=full.id)
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/d.txt", file_text="") == too_many_files(3, 2)


def test_max_file_bytes_from_the_policy_replaces_the_default(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    assert tool.commands.max_file_bytes == 102_400
    vault.set_policy(actor="ops", max_file_bytes=10)
    assert tool.commands.max_file_bytes == 10
    assert create(tool, "/memories/a.txt", "é" * 5) == "File created successfully at: /memories/a.txt"
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/b.txt", file_text="x" * 11) == (
            "Error: File /memories/b.txt would be 11 bytes; the limit is 10 bytes per file. Nothing was written. "
            "Keep the file shorter or split it into several files."
        )
        assert refused(tool, command="insert", path="/memories/a.txt", insert_line=0, insert_text="x") == (
            "Error: File /memories/a.txt would be 12 bytes; the limit is 10 bytes per file. Nothing was written. "
            "Keep the file shorter or split it into several files."
        )
    vault.set_policy(actor="ops", max_file_bytes=200_000)
    assert create(tool, "/memories/big.txt", "x" * 150_000) == "File created successfully at: /memories/big.txt"


def test_the_per_file_limit_applies_to_the_redacted_text(vault: Vault, vault_path: Path) -> None:
    text = f"c {CARD}"  # 21 bytes; stored as "c [REDACTED:card_number]" (24)
    tool = VaultMemoryTool(vault, actor="bot", policy={"secrets": "redact", "max_file_bytes": 22})
    with unchanged(vault, vault_path):
        assert refused(tool, command="create", path="/memories/a.txt", file_text=text).startswith(
            "Error: File /memories/a.txt would be 24 bytes; the limit is 22 bytes per file."
        )
    key_text = f"k {ANTHROPIC_KEY}"  # 110 bytes; stored as 28
    small = VaultMemoryTool(vault, actor="bot", policy={"secrets": "redact", "max_file_bytes": 30})
    create(small, "/memories/k.txt", key_text)
    assert vault.read("/memories/k.txt") == "k [REDACTED:anthropic_api_key]"


def test_concurrent_writers_never_exceed_max_files(vault: Vault, vault_path: Path, key: str) -> None:
    limit, per_thread, threads = 5, 8, 3
    vault.set_policy(actor="ops", max_files=limit)
    made: list[str] = []
    refusals: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)
    guard = threading.Lock()

    def writer(t: int) -> None:
        try:
            opened = Vault.open(vault_path, key=key)
            tool = VaultMemoryTool(opened, actor=f"bot-{t}", session=f"s-{t}")
            start.wait()
            for j in range(per_thread):
                path = f"/memories/t{t}/f{j}.txt"
                try:
                    create(tool, path, f"{t}.{j}\n")
                except ToolError as err:
                    with guard:
                        refusals.append(str(err.content))
                else:
                    with guard:
                        made.append(path)
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert not w.is_alive(), "a writer thread hung"
    assert not errors, errors
    assert len(made) == limit
    assert sorted(files_of(vault)) == sorted(made)
    assert commit_count(vault_path) == limit
    assert refusals == [too_many_files(limit, limit)] * (threads * per_thread - limit)
    assert vault.verify().ok


# -- import honours the policy ------------------------------------------------------------


def test_import_uses_the_policys_per_file_limit_unless_given_one(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    vault.set_policy(actor="ops", max_file_bytes=10)
    source = sdk_memories(tmp_path / "sdk", {"ok.txt": "x" * 10, "big.txt": "y" * 11})
    with unchanged(vault, vault_path), pytest.raises(LimitError) as info:
        vault.import_folder(source)
    assert str(info.value).startswith("Error: cannot import 'big.txt': ")
    assert "10 bytes" in str(info.value)
    assert str(info.value).endswith("Nothing was imported.")
    result = vault.import_folder(source, max_file_bytes=11)
    assert result.files == 2
    assert files_of(vault) == {"/memories/big.txt": "y" * 11, "/memories/ok.txt": "x" * 10}


def test_import_refuses_going_over_max_files(vault: Vault, vault_path: Path, tmp_path: Path, call: Any) -> None:
    call(command="create", path="/memories/existing.txt", file_text="e\n")
    vault.set_policy(actor="ops", max_files=2)
    source = sdk_memories(tmp_path / "sdk", {"a.txt": "a\n", "b/c.txt": "c\n"})
    with unchanged(vault, vault_path), pytest.raises(LimitError) as info:
        vault.import_folder(source)
    assert str(info.value) == (
        "Error: cannot import: the memory would hold 3 files, over this vault's limit of 2. Raise the limit "
        "(vaultmem policy set max_files=N) or import fewer files. Nothing was imported."
    )
    # Replacing the whole memory counts only the folder's files.
    result = vault.import_folder(source, replace=True)
    assert result.version is not None
    assert sorted(files_of(vault)) == ["/memories/a.txt", "/memories/b/c.txt"]


def test_import_refuses_going_over_max_vault_bytes(vault: Vault, vault_path: Path, tmp_path: Path, call: Any) -> None:
    call(command="create", path="/memories/existing.txt", file_text="e" * 600)
    vault.set_policy(actor="ops", max_vault_bytes=1000)
    source = sdk_memories(tmp_path / "sdk", {"a.txt": "a" * 300, "b.txt": "b" * 101})
    with unchanged(vault, vault_path), pytest.raises(LimitError) as info:
        vault.import_folder(source)
    assert str(info.value) == (
        "Error: cannot import: the memory would hold 1,001 bytes, over this vault's limit of 1,000. Raise the limit "
        "(vaultmem policy set max_vault_bytes=N) or import less. Nothing was imported."
    )
    (tmp_path / "sdk" / "memories" / "b.txt").write_text("b" * 100)
    assert vault.import_folder(source).files == 2


def test_import_refuses_a_file_holding_a_secret_under_refuse(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    vault.set_policy(actor="ops", secrets="refuse")
    source = sdk_memories(tmp_path / "sdk", {"a.txt": "fine\n", "billing/card.txt": f"card {CARD}\n"})
    with unchanged(vault, vault_path), pytest.raises(VaultError) as info:
        vault.import_folder(source)
    message = str(info.value)
    assert message.startswith("Error: cannot import '/memories/billing/card.txt': ")
    assert "a card number" in message
    assert message.endswith("Nothing was imported.")
    assert CARD not in message


def test_import_refuses_a_path_holding_a_secret_under_redact(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    vault.set_policy(actor="ops", secrets="redact")
    source = sdk_memories(tmp_path / "sdk", {f"{ANTHROPIC_KEY}.txt": "fine\n"})
    with unchanged(vault, vault_path), pytest.raises(VaultError) as info:
        vault.import_folder(source)
    assert str(info.value).startswith(f"Error: cannot import '/memories/{ANTHROPIC_KEY}.txt': ")
    assert "an Anthropic API key" in str(info.value)
    assert str(info.value).endswith("Nothing was imported.")


def test_import_redacts_under_redact_and_reports_what(vault: Vault, tmp_path: Path) -> None:
    vault.set_policy(actor="ops", secrets="redact", patterns=TICKET)
    source = sdk_memories(
        tmp_path / "sdk",
        {"a.txt": "clean\n", "b.txt": f"{CARD} / {ANTHROPIC_KEY} / {CARD}\n", "c/d.txt": "TS-000777\n"},
    )
    result = vault.import_folder(source, actor="migration")
    assert dict(result.redacted) == {
        "/memories/b.txt": ("anthropic_api_key", "card_number"),
        "/memories/c/d.txt": ("ticket_secret",),
    }
    assert files_of(vault) == {
        "/memories/a.txt": "clean\n",
        "/memories/b.txt": "[REDACTED:card_number] / [REDACTED:anthropic_api_key] / [REDACTED:card_number]\n",
        "/memories/c/d.txt": "[REDACTED:ticket_secret]\n",
    }
    assert result.bytes == sum(len(t.encode()) for t in files_of(vault).values())
    assert ANTHROPIC_KEY not in all_versions_text(vault)


def test_import_under_off_reports_no_redactions(vault: Vault, tmp_path: Path) -> None:
    source = sdk_memories(tmp_path / "sdk", {"b.txt": f"{CARD}\n"})
    result = vault.import_folder(source)
    assert dict(result.redacted) == {}
    assert vault.read("/memories/b.txt") == f"{CARD}\n"


def test_import_never_stores_a_file_over_the_per_file_limit_after_redaction(vault: Vault, tmp_path: Path) -> None:
    """Redaction can lengthen a text (a 19-character card becomes 22 characters);
    Claude's writes check the limit on what is stored, and an import must too."""
    vault.set_policy(actor="ops", secrets="redact", max_file_bytes=22)
    source = sdk_memories(tmp_path / "sdk", {"a.txt": f"c {CARD}"})  # 21 bytes in the folder, 24 redacted
    with contextlib.suppress(LimitError):
        vault.import_folder(source)
    assert all(len(text.encode()) <= 22 for text in files_of(vault).values()), files_of(vault)


def test_a_refusal_never_repeats_the_secret_it_found(vault: Vault) -> None:
    token = "ghp_" + "Zq8Lm2Xv9Tr4Kp7Wn3Bc6Hd1Fs5Jg0Ye2Uab"
    tool = VaultMemoryTool(vault, actor="bot", policy={"secrets": "refuse"})
    for params in (
        {"command": "create", "path": f"/memories/{token}.txt", "file_text": "x\n"},
        {"command": "create", "path": "/memories/notes.txt", "file_text": f"token {token}\n"},
    ):
        with pytest.raises(ToolError) as info:
            tool.call(params)
        assert "GitHub token" in str(info.value.content)
        assert token not in str(info.value.content)
    assert vault.history() == []


@pytest.mark.parametrize("text", ["0d", "0", "0s", " 0 w "])
def test_a_zero_duration_is_refused_with_the_rule_it_breaks(text: str) -> None:
    """The message asks for what it accepts: a whole number of at least 1."""
    with pytest.raises(VaultError) as info:
        parse_duration(text)
    assert "at least 1" in str(info.value), str(info.value)
