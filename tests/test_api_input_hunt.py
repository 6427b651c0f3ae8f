"""Hostile input to the public Python API, as an application embedding
vaultmem passes it: a value of the wrong type, a NUL, a lone surrogate, a
bool where a number belongs, NaN.  Each is a VaultError that names the
argument, never a TypeError or ValueError from deep inside, and changes
nothing: git's history and ``verify()`` are as before."""

from __future__ import annotations

import functools
import math
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeClock, commit_count, git
from vaultmem import (
    AsyncVaultMemoryTool,
    BadKeyError,
    Policy,
    SigningKey,
    Vault,
    VaultError,
    VaultMemoryTool,
    memory_request,
)

BAD_NAMES: list[Any] = [None, b"/tmp/x", 3, 1.5, ["x"], "", "a\x00b", "x\ud800"]


def shown(value: object) -> str:
    """A test id that is the same in every process (pytest-xdist compares
    them): ``repr`` without an object's address."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _refs(vault_path: Path) -> str:
    return git(vault_path, "for-each-ref", "--format=%(refname) %(objectname)")


@pytest.fixture
def seeded(vault: Vault) -> Vault:
    tool = VaultMemoryTool(vault, actor="app", session="s-1")
    tool.call({"command": "create", "path": "/memories/notes.txt", "file_text": "one\ntwo\n"})
    tool.call({"command": "str_replace", "path": "/memories/notes.txt", "old_str": "two", "new_str": "three"})
    return vault


def _refused_changing_nothing(vault: Vault, vault_path: Path, act: Callable[[], object], *words: str) -> str:
    before = (_refs(vault_path), commit_count(vault_path))
    with pytest.raises(VaultError) as info:
        act()
    message = str(info.value)
    assert message.startswith("Error: "), message
    for word in words:
        assert word in message, message
    assert (_refs(vault_path), commit_count(vault_path)) == before
    assert vault.verify().ok
    return message


# -- folders and files named by the caller -----------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES, ids=shown)
def test_a_folder_name_that_is_no_file_name_is_a_vault_error(
    seeded: Vault, vault_path: Path, tmp_path: Path, key: str, name: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # "" is no name for the current folder: nothing may be written there
    for act, argument in (
        (lambda: Vault.init(name, key=key), "path"),
        (lambda: Vault.open(name, key=key), "path"),
        (lambda: seeded.import_folder(name), "folder"),
        (lambda: seeded.export_folder(name), "folder"),
    ):
        _refused_changing_nothing(seeded, vault_path, act, argument)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.vault"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=shown)
def test_a_key_file_name_that_is_no_file_name_is_a_bad_key_error(
    seeded: Vault, vault_path: Path, tmp_path: Path, name: Any
) -> None:
    for act in (
        lambda: Vault.init(tmp_path / "new.vault", key_file=name),
        lambda: Vault.open(vault_path, key_file=name),
        lambda: seeded.change_key(key_file=name),
    ):
        with pytest.raises(BadKeyError) as info:
            act()
        assert "key file" in str(info.value)
        assert "NUL" not in str(info.value) or "\x00" in str(name)
    assert not (tmp_path / "new.vault").exists()
    assert seeded.verify().ok


@pytest.mark.parametrize("name", ["a\x00b", "x\ud800"], ids=shown)
def test_a_signing_key_name_that_is_no_file_name_is_a_bad_key_error(seeded: Vault, name: str) -> None:
    with pytest.raises(BadKeyError, match="signing key"):
        VaultMemoryTool(seeded, actor="app", signing_key=name)


@pytest.mark.parametrize("name", BAD_NAMES, ids=shown)
def test_a_clone_folder_name_that_is_no_file_name_is_a_vault_error(
    seeded: Vault, vault_path: Path, tmp_path: Path, key: str, name: Any
) -> None:
    _refused_changing_nothing(seeded, vault_path, lambda: Vault.clone(str(vault_path), name, key=key), "path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.vault"]


@pytest.mark.parametrize("text", [None, b"-----BEGIN OPENSSH PRIVATE KEY-----", 3, "\ud800 not a key"], ids=shown)
def test_a_signing_key_text_that_is_no_text_is_a_bad_key_error(text: Any) -> None:
    with pytest.raises(BadKeyError, match="signing key"):
        SigningKey.from_text(text)
    with pytest.raises(BadKeyError, match="signing key"):
        SigningKey.load(text if not isinstance(text, str) else 3)


# -- numbers -------------------------------------------------------------------------


@pytest.mark.parametrize("now", ["1790000000", b"1", True, math.nan, math.inf, -math.inf, [1]], ids=shown)
def test_now_must_be_a_finite_number(seeded: Vault, vault_path: Path, now: Any) -> None:
    _refused_changing_nothing(seeded, vault_path, lambda: seeded.expire(1, now=now), "now")
    _refused_changing_nothing(seeded, vault_path, lambda: seeded.apply_retention(1, now=now), "now")


def test_retention_at_an_infinite_now_does_not_forget_the_history(seeded: Vault, vault_path: Path) -> None:
    _refused_changing_nothing(seeded, vault_path, lambda: seeded.apply_retention("365d", now=math.inf), "now")
    assert seeded.find("two")  # the first version is still readable


@pytest.mark.parametrize("limit", ["2", b"2", True, 1.5, math.nan, -1, [2]], ids=shown)
def test_policy_history_limit_must_be_a_non_negative_integer(seeded: Vault, limit: Any) -> None:
    seeded.set_policy(actor="op", max_files=50)
    with pytest.raises(VaultError, match="limit"):
        seeded.policy_history(limit)
    assert len(seeded.policy_history(0)) == 0
    assert len(seeded.policy_history(1)) == 1


@pytest.mark.parametrize("storage_format", [True, 2.0, "2"], ids=shown)
def test_storage_format_must_be_an_integer(tmp_path: Path, key: str, storage_format: Any) -> None:
    with pytest.raises(VaultError, match="storage format"):
        Vault.init(tmp_path / "v", key=key, storage_format=storage_format)
    assert not (tmp_path / "v").exists()


# -- collections ---------------------------------------------------------------------


@pytest.mark.parametrize("checkpoints", [None, 3, "vaultmem checkpoint text", b"text", object()], ids=shown)
def test_verify_checkpoints_must_be_a_list_of_texts(seeded: Vault, checkpoints: Any) -> None:
    with pytest.raises(VaultError, match="checkpoints"):
        seeded.verify(checkpoints=checkpoints)


def test_verify_checkpoints_items_must_be_texts(seeded: Vault) -> None:
    with pytest.raises(VaultError, match="checkpoints"):
        seeded.verify(checkpoints=[b"text"])  # type: ignore[list-item]


@pytest.mark.parametrize("pattern", [None, 3, 1.5, True, b"one", object()], ids=shown)
def test_forget_matching_pattern_of_the_wrong_type(seeded: Vault, vault_path: Path, pattern: Any) -> None:
    _refused_changing_nothing(
        seeded, vault_path, lambda: seeded.forget_matching(pattern, reason="r", dry_run=True), "forget_matching"
    )


@pytest.mark.parametrize("detectors", [None, 3, True, "abc", ["x"], [object()]], ids=shown)
def test_tool_detectors_are_checked_when_the_tool_is_made(seeded: Vault, vault_path: Path, detectors: Any) -> None:
    _refused_changing_nothing(
        seeded, vault_path, lambda: VaultMemoryTool(seeded, actor="app", detectors=detectors), "detector"
    )


# -- flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("flag", [None, 0, 1, "no", b"", 1.5], ids=shown)
def test_flags_must_be_true_or_false(seeded: Vault, vault_path: Path, tmp_path: Path, flag: Any) -> None:
    first = seeded.history()[-1].id
    source = tmp_path / "folder" / "memories"
    source.mkdir(parents=True)
    (source / "other.txt").write_text("x")
    for act, argument in (
        (lambda: seeded.forget("/memories/notes.txt", reason="r", dry_run=flag), "dry_run"),
        (lambda: seeded.redact(first, "/memories/notes.txt", reason="r", dry_run=flag), "dry_run"),
        (lambda: seeded.forget_matching("one", reason="r", dry_run=flag), "dry_run"),
        (lambda: seeded.apply_retention(1, dry_run=flag), "dry_run"),
        (lambda: seeded.expire(0, dry_run=flag), "dry_run"),
        (lambda: seeded.import_folder(tmp_path / "folder", replace=flag), "replace"),
        (lambda: seeded.set_policy(actor="op", reset=flag), "reset"),
        (lambda: seeded.rotate_key(reencrypt=flag), "reencrypt"),
        (lambda: seeded.find("one", regex=flag), "regex"),
        (lambda: seeded.find("one", ignore_case=flag), "ignore_case"),
    ):
        _refused_changing_nothing(seeded, vault_path, act, argument)
    assert seeded.read("/memories/notes.txt") == "one\nthree\n"
    assert len(seeded.keys()) == 1


def test_good_values_still_work(seeded: Vault, vault_path: Path, tmp_path: Path, clock: FakeClock, key: str) -> None:
    """The checks refuse only what is wrong: paths as str and os.PathLike,
    str subclasses, plain flags and numbers keep working."""

    class Name(str):
        pass

    assert seeded.export_folder(Name(str(tmp_path / "out"))).files == 1
    assert Vault.open(os.fspath(vault_path), key=Name(key)).read("/memories/notes.txt")
    assert seeded.expire(10**9, dry_run=True, now=clock() + 0.5).stale == ()
    assert seeded.apply_retention(10**9, dry_run=True, now=int(clock())).versions == ()
    assert seeded.forget_matching("one", dry_run=True).versions
    assert seeded.verify(checkpoints=()).ok
    assert seeded.policy_history(None) == []


@pytest.mark.parametrize("when", [True, 1.5, math.nan, "1790000000", [1]], ids=shown)
def test_signer_times_must_be_integers(seeded: Vault, vault_path: Path, when: Any) -> None:
    operator = SigningKey.generate()
    seeded.sign_as("op", operator)
    seeded.add_signer("op", operator.public, actor="op", operator=True)
    other = SigningKey.generate().public
    for argument in ("valid_after", "valid_before"):
        _refused_changing_nothing(
            seeded,
            vault_path,
            functools.partial(seeded.add_signer, "al", other, actor="op", **{argument: when}),
            argument.replace("_", "-"),
        )
    _refused_changing_nothing(
        seeded, vault_path, lambda: seeded.add_signer("al", other, actor="op", operator=1), "operator"
    )


# -- policies and requests -------------------------------------------------------------


@pytest.mark.parametrize("changes", [None, 3, "max_files", [("max_files", 5)]], ids=shown)
def test_policy_changes_must_be_a_dict(changes: Any) -> None:
    with pytest.raises(VaultError, match="dict of fields"):
        Policy().with_changes(changes)


@pytest.mark.parametrize("field", [b"max_files", 3, None, ("max_files",)], ids=shown)
def test_a_policy_override_with_a_key_that_is_no_field_name(seeded: Vault, vault_path: Path, field: Any) -> None:
    _refused_changing_nothing(
        seeded, vault_path, lambda: VaultMemoryTool(seeded, actor="app", policy={field: 5}), "unknown policy field"
    )


@pytest.mark.parametrize("messages", [3, True, 1.5, object()], ids=shown)
def test_memory_request_messages_of_the_wrong_type(seeded: Vault, messages: Any) -> None:
    tool = VaultMemoryTool(seeded, actor="app")
    with pytest.raises(VaultError, match="messages"):
        memory_request(tool, messages=messages)


@pytest.mark.parametrize("every", [math.nan, math.inf, 10**30], ids=shown)
def test_a_sync_interval_the_sync_thread_cannot_wait_for_is_refused(
    seeded: Vault, vault_path: Path, tmp_path: Path, every: float
) -> None:
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    seeded.add_remote("origin", str(server))
    _refused_changing_nothing(
        seeded, vault_path, lambda: VaultMemoryTool(seeded, actor="app", sync="origin", sync_every=every), "sync_every"
    )


@pytest.mark.parametrize("given", ["path", None, 3], ids=shown)
def test_a_tool_given_something_other_than_a_vault(vault_path: Path, given: Any) -> None:
    for cls in (VaultMemoryTool, AsyncVaultMemoryTool):
        with pytest.raises(VaultError, match=r"first argument must be an open vault.*Vault\.open\(path"):
            cls(str(vault_path) if given == "path" else given, actor="app")
