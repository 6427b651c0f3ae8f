"""Key administration: listing data keys, rotating them (with or without
re-encrypting), changing the user's key or passphrase, and decrypting a raw blob
for git's textconv."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import FakeClock, commit_count, git

from vaultmem import BadKeyError, IntegrityError, Vault, VaultError, VaultMemoryTool, WrongKeyError, generate_key
from vaultmem.core.crypto import ENV_KEY
from vaultmem.repo.store import KEYRING_REF


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)


def blob_key_id(vault_path: Path, spec: str) -> str:
    raw = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "blob", spec], capture_output=True, check=True
    ).stdout
    header = raw.partition(b"\n")[0].decode("ascii")
    match = re.fullmatch(r"vaultmem-blob 2 (\S+) [0-9a-f]{16} (\d+)", header)
    assert match, header
    return match.group(1)


def raw_blob(vault_path: Path, spec: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "blob", spec], capture_output=True, check=True
    ).stdout


def keyring_state(vault_path: Path) -> tuple[str, bytes]:
    return git(vault_path, "rev-parse", KEYRING_REF), raw_blob(vault_path, f"{KEYRING_REF}:keyring.json")


def key_ids(vault: Vault) -> list[str]:
    listed = vault.keys()
    return [k.id for k in listed]


def when(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(int(clock.now), tz=timezone.utc)


@pytest.fixture
def files(vault: Vault, call, clock: FakeClock) -> dict[str, str]:
    """Three files written under the first data key, one of them edited."""
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    call(command="create", path="/memories/dir/b.txt", file_text="bravo ✓\n")
    call(command="create", path="/memories/c.txt", file_text="charlie\n")
    call(command="str_replace", path="/memories/a.txt", old_str="alpha", new_str="alpha two")
    clock.advance(3600)
    return {"/memories/a.txt": "alpha two\n", "/memories/dir/b.txt": "bravo ✓\n", "/memories/c.txt": "charlie\n"}


# -- keys() and rotate_key() ----------------------------------------------------


def test_a_new_vault_has_one_active_key(vault: Vault, vault_path: Path, clock: FakeClock, call) -> None:
    keys = vault.keys()
    assert len(keys) == 1
    only = keys[0]
    assert only.active is True
    assert only.created == when(clock)
    assert only.created.tzinfo is not None and only.created.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    call(command="create", path="/memories/a.txt", file_text="x")
    assert blob_key_id(vault_path, "main:memories/a.txt") == only.id


def test_rotate_key_starts_a_new_active_key_for_new_writes(
    vault: Vault, vault_path: Path, files: dict[str, str], clock: FakeClock, call
) -> None:
    old = vault.keys()[0]
    commits = commit_count(vault_path)
    new = vault.rotate_key()
    assert new.active is True and new.id != old.id
    assert new.created == when(clock)
    assert commit_count(vault_path) == commits  # no commit on main without reencrypt
    listed = vault.keys()
    assert [k.id for k in listed] == [old.id, new.id]  # oldest first
    assert [k.active for k in listed] == [False, True]
    assert listed[0].created == old.created

    call(command="create", path="/memories/d.txt", file_text="delta\n")
    call(command="str_replace", path="/memories/c.txt", old_str="charlie", new_str="charlie two")
    assert blob_key_id(vault_path, "main:memories/d.txt") == new.id
    assert blob_key_id(vault_path, "main:memories/c.txt") == new.id
    # Untouched files keep the old key and still read, now and in history.
    assert blob_key_id(vault_path, "main:memories/a.txt") == old.id
    assert blob_key_id(vault_path, "main:memories/dir/b.txt") == old.id
    assert vault.read("/memories/a.txt") == "alpha two\n"
    assert vault.read("/memories/c.txt", at="main~1") == "charlie\n"
    assert vault.verify().ok


def test_a_rotated_vault_reopens_with_the_same_key(
    vault: Vault, vault_path: Path, key: str, files: dict[str, str], call
) -> None:
    vault.rotate_key()
    call(command="create", path="/memories/d.txt", file_text="delta\n")
    again = Vault.open(vault_path, key=key)
    assert key_ids(again) == key_ids(vault)
    assert again.read("/memories/a.txt") == "alpha two\n"
    assert again.read("/memories/d.txt") == "delta\n"
    assert again.verify().ok


def test_rotate_key_with_reencrypt_is_one_rekey_commit(
    vault: Vault, vault_path: Path, key: str, files: dict[str, str]
) -> None:
    old_id = vault.keys()[0].id
    history_before = [v.id for v in vault.history()]
    calls: list[tuple[int, int]] = []
    new = vault.rotate_key(reencrypt=True, actor="key-admin", progress=lambda done, total: calls.append((done, total)))
    assert commit_count(vault_path) == len(history_before) + 1
    latest = vault.history(limit=1)[0]
    assert latest.command == "rekey" and latest.actor == "key-admin"
    assert git(vault_path, "log", "-1", "--format=%an").strip() == "key-admin"
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert len(names) == 3
    for name in names:
        assert blob_key_id(vault_path, f"main:{name}") == new.id
    for path, text in files.items():
        assert vault.read(path) == text
    # The history before the rekey is untouched and still reads under the old key.
    assert [v.id for v in vault.history()][1:] == history_before
    assert blob_key_id(vault_path, "main~1:memories/a.txt") == old_id
    assert vault.read("/memories/a.txt", at="main~2") == "alpha\n"
    assert calls and calls[-1] == (3, 3)
    assert [done for done, _ in calls] == sorted({done for done, _ in calls})
    assert vault.diff("main~1") == ""
    assert vault.verify().ok
    assert Vault.open(vault_path, key=key).read("/memories/dir/b.txt") == "bravo ✓\n"


@pytest.mark.parametrize("second", ["rotate", "rekey", "change_key"])
def test_a_stale_vault_handle_never_loses_a_key(
    vault: Vault, vault_path: Path, key: str, files: dict[str, str], call, second: str
) -> None:
    stale = Vault.open(vault_path, key=key)  # opened before the rotation below
    first = vault.rotate_key()
    call(command="create", path="/memories/new.txt", file_text="under the new key\n")
    assert blob_key_id(vault_path, "main:memories/new.txt") == first.id
    try:
        if second == "rotate":
            stale.rotate_key()
        elif second == "rekey":
            stale.rotate_key(reencrypt=True)
        else:
            stale.change_key(key=key)
    except VaultError:
        pass  # refusing is fine; dropping the other key is not
    fresh = Vault.open(vault_path, key=key)
    assert first.id in key_ids(fresh)
    assert fresh.read("/memories/new.txt") == "under the new key\n"
    assert fresh.read("/memories/a.txt", at="main~1") == "alpha two\n"
    assert fresh.verify().ok


def test_a_handle_opened_with_the_old_key_cannot_undo_a_key_change(
    vault: Vault, vault_path: Path, key: str, files: dict[str, str]
) -> None:
    stale = Vault.open(vault_path, key=key)
    new_key = generate_key()
    vault.change_key(key=new_key)
    for attempt in (stale.rotate_key, lambda: stale.change_key(passphrase="something else")):
        with contextlib.suppress(VaultError):
            attempt()
    # Refusing is fine; what must not happen is a keyring rewritten from the stale
    # handle's copy (data keys under the old key again, or a key lost). Whichever
    # user key is current opens the vault and reads everything.
    try:
        fresh = Vault.open(vault_path, key=new_key)
    except WrongKeyError:
        fresh = Vault.open(vault_path, passphrase="something else")
    assert fresh.read("/memories/c.txt") == "charlie\n"
    assert fresh.verify().ok


# -- change_key() ------------------------------------------------------------------


def test_change_key_to_a_new_key(vault: Vault, vault_path: Path, key: str, files: dict[str, str], call) -> None:
    new_key = generate_key()
    ids = key_ids(vault)
    commits = commit_count(vault_path)
    vault.change_key(key=new_key)
    assert commit_count(vault_path) == commits
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path, key=key)
    reopened = Vault.open(vault_path, key=new_key)
    assert key_ids(reopened) == ids  # the data keys are rewrapped, not replaced
    for version in reopened.history():
        for entry in reopened.listing(at=version.id):
            if entry.kind == "file":
                assert reopened.read(entry.path, at=version.id) == vault.read(entry.path, at=version.id)
    assert reopened.read("/memories/a.txt", at="main~3") == "alpha\n"
    assert reopened.verify().ok
    # The vault already open keeps working, and what it writes opens with the new key.
    call(command="create", path="/memories/after.txt", file_text="after the change\n")
    assert vault.verify().ok
    assert Vault.open(vault_path, key=new_key).read("/memories/after.txt") == "after the change\n"


def test_change_key_from_a_key_file(tmp_path: Path, vault: Vault, vault_path: Path, key: str, files) -> None:
    key_file = tmp_path / "vault.key"
    new_key = generate_key()
    key_file.write_text(new_key + "\n")
    key_file.chmod(0o600)
    vault.change_key(key_file=key_file)
    assert Vault.open(vault_path, key_file=key_file).read("/memories/c.txt") == "charlie\n"
    assert Vault.open(vault_path, key=new_key).read("/memories/c.txt") == "charlie\n"
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path, key=key)


def test_change_key_to_a_passphrase(vault: Vault, vault_path: Path, key: str, files: dict[str, str]) -> None:
    vault.change_key(passphrase="correct horse battery staple")
    reopened = Vault.open(vault_path, passphrase="correct horse battery staple")
    assert reopened.read("/memories/dir/b.txt") == "bravo ✓\n"
    assert reopened.read("/memories/a.txt", at="main~1") == "alpha\n"
    assert reopened.verify().ok
    with pytest.raises((WrongKeyError, BadKeyError)):
        Vault.open(vault_path, key=key)
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path, passphrase="wrong horse")


def test_change_passphrase_to_a_key(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "pass.vault"
    vault = Vault.init(path, passphrase="first passphrase", clock=clock)
    vault.rotate_key()  # two data keys to rewrap
    new_key = generate_key()
    vault.change_key(key=new_key)
    with pytest.raises((WrongKeyError, BadKeyError)):
        Vault.open(path, passphrase="first passphrase")
    reopened = Vault.open(path, key=new_key)
    assert len(reopened.keys()) == 2
    assert reopened.verify().ok


@pytest.mark.parametrize(
    "sources",
    [
        {},
        {"key": None, "key_file": None, "passphrase": None},
        {"key": "KEY", "passphrase": "a passphrase"},
        {"key": "KEY", "key_file": "FILE"},
        {"key": "not a key"},
        {"passphrase": ""},
    ],
)
def test_change_key_without_exactly_one_good_source_changes_nothing(
    tmp_path: Path, vault: Vault, vault_path: Path, key: str, files: dict[str, str], sources: dict[str, object]
) -> None:
    key_file = tmp_path / "k"
    key_file.write_text(generate_key())
    key_file.chmod(0o600)
    given = {
        name: (generate_key() if value == "KEY" else key_file if value == "FILE" else value)
        for name, value in sources.items()
    }
    before = keyring_state(vault_path)
    with pytest.raises(VaultError) as info:
        vault.change_key(**given)  # type: ignore[arg-type]
    assert str(info.value).startswith("Error: ")
    assert keyring_state(vault_path) == before
    assert Vault.open(vault_path, key=key).read("/memories/a.txt") == "alpha two\n"


# -- decrypt_blob() and textconv ----------------------------------------------------


def test_decrypt_blob_round_trips_blobs_read_with_git(vault: Vault, vault_path: Path, files: dict[str, str]) -> None:
    assert vault.decrypt_blob(raw_blob(vault_path, "main:memories/dir/b.txt")) == ("/memories/dir/b.txt", "bravo ✓\n")
    assert vault.decrypt_blob(raw_blob(vault_path, "main~3:memories/a.txt")) == ("/memories/a.txt", "alpha\n")
    vault.rotate_key()
    # Blobs under a rotated-out key still decrypt.
    assert vault.decrypt_blob(raw_blob(vault_path, "main:memories/a.txt")) == ("/memories/a.txt", "alpha two\n")


def test_decrypt_blob_refuses_anything_else(tmp_path: Path, vault: Vault, vault_path: Path, files) -> None:
    good = raw_blob(vault_path, "main:memories/c.txt")
    header, _, token = good.partition(b"\n")
    other = Vault.init(tmp_path / "other.vault", key=generate_key())
    VaultMemoryTool(other, actor="x").call({"command": "create", "path": "/memories/c.txt", "file_text": "charlie\n"})
    foreign = raw_blob(other.path, "main:memories/c.txt")
    bad = [
        b"",
        b"garbage",
        b"\x00\xff" * 40,
        header + b"\n",
        header + b"\n" + token[:-4],
        header + b"\n" + token[:40] + (b"A" if token[40:41] != b"A" else b"B") + token[41:],
        b" ".join([*header.split(b" ")[:3], b"9"]) + b"\n" + token,
        foreign,
    ]
    for data in bad:
        with pytest.raises(IntegrityError):
            vault.decrypt_blob(data)


def test_configure_textconv_sets_git_config_and_attributes(vault: Vault, vault_path: Path) -> None:
    vault.configure_textconv("vaultmem textconv")
    assert git(vault_path, "config", "diff.vaultmem.textconv").strip() == "vaultmem textconv"
    assert git(vault_path, "config", "--bool", "diff.vaultmem.cachetextconv").strip() == "false"
    attributes = (vault_path / "info" / "attributes").read_text()
    assert "memories/** diff=vaultmem" in attributes.splitlines()
    vault.configure_textconv("vaultmem textconv")  # idempotent
    assert (vault_path / "info" / "attributes").read_text().splitlines().count("memories/** diff=vaultmem") == 1


def test_git_diff_shows_plaintext_through_textconv(
    tmp_path: Path, vault: Vault, vault_path: Path, key: str, call
) -> None:
    call(command="create", path="/memories/a.txt", file_text="one\ntwo\n")
    call(command="str_replace", path="/memories/a.txt", old_str="two", new_str="2")
    script = tmp_path / "textconv.py"
    script.write_text(
        "import os, sys\n"
        "from vaultmem.store import Vault\n"
        "vault = Vault.open(os.environ['VAULT'], key=os.environ['VAULTMEM_KEY'])\n"
        "with open(sys.argv[1], 'rb') as fh:\n"
        "    sys.stdout.write(vault.decrypt_blob(fh.read())[1])\n"
    )
    vault.configure_textconv(f"{sys.executable} {script}")
    env = {**os.environ, "VAULT": str(vault_path), "VAULTMEM_KEY": key}
    out = subprocess.run(
        ["git", "-C", str(vault_path), "diff", "main~1", "main"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "-two\n+2\n" in out
    assert "vaultmem-blob" not in out
    assert git(vault_path, "for-each-ref", "refs/notes") == ""  # no textconv cache holding plaintext


def test_changing_to_the_key_the_vault_already_has_is_refused_and_changes_nothing(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """Before, the keyring was rewritten and the CLI said "the old key no
    longer opens it", which was false: the old key was the new one."""
    before = keyring_state(vault_path)
    with pytest.raises(VaultError, match="already opens with that key"):
        vault.change_key(key=key)
    assert keyring_state(vault_path) == before
    key_file = tmp_path / "same.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    env = {**os.environ, ENV_KEY: key}
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaultmem",
            "--vault",
            str(vault_path),
            "key",
            "change",
            "--new-key-file",
            str(key_file),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert shown.returncode != 0
    assert "already opens with that key" in shown.stderr and "no longer opens" not in shown.stdout
    assert keyring_state(vault_path) == before
    Vault.open(vault_path, key=key).close()


def test_a_new_key_that_is_not_a_key_points_to_the_new_passphrase_options(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """Before, the hint named --passphrase and VAULTMEM_PASSPHRASE, which give
    the key that opens the vault, not the new one."""
    before = keyring_state(vault_path)
    env = {**os.environ, ENV_KEY: key, "VAULTMEM_NEW_KEY": "correct horse battery staple"}
    shown = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "key", "change"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert shown.returncode != 0
    assert "VAULTMEM_NEW_PASSPHRASE" in shown.stderr and "--passphrase or" not in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1
    assert keyring_state(vault_path) == before
