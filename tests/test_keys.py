"""Invariant 7 and the key sources: a wrong key or a folder that is not a vault
is one clear error at open, before any work."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from conftest import commit_count, git

from vaultmem import BadKeyError, NotAVaultError, Vault, VaultError, VaultMemoryTool, WrongKeyError, generate_key
from vaultmem.core.crypto import ENV_KEY
from vaultmem.repo.store import KEYRING_REF


def folder_state(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder below ``folder`` with its mtime, size and bytes."""
    state: dict[str, tuple[int, int, bytes]] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            st = path.stat()
            data = path.read_bytes() if path.is_file() else b""
            state[str(path.relative_to(folder))] = (st.st_mtime_ns, st.st_size, data)
    return state


@pytest.fixture
def used_vault(vault: Vault, call) -> Vault:
    call(command="create", path="/memories/a.txt", file_text="hello\n")
    call(command="str_replace", path="/memories/a.txt", old_str="hello", new_str="bye")
    return vault


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)


# -- wrong key -----------------------------------------------------------------


def test_wrong_key_fails_fast_at_open(used_vault: Vault, vault_path: Path) -> None:
    with pytest.raises(WrongKeyError) as info:
        Vault.open(vault_path, key=generate_key())
    assert isinstance(info.value, VaultError)
    assert "does not open this vault" in str(info.value)


def test_wrong_key_touches_nothing_in_the_vault(used_vault: Vault, vault_path: Path, key: str) -> None:
    # An operator moved main back, a writer died (its flag is set) and git
    # holds main.lock: neither a wrong key nor the right one changes any file.
    used_vault.close()  # its upkeep after the writes is done
    head = git(vault_path, "rev-parse", "main~1").strip()
    git(vault_path, "update-ref", "refs/heads/main", "main~1")
    lock = vault_path / "vaultmem" / "lock"
    lock.write_bytes(b"1" + lock.read_bytes()[1:])
    (vault_path / "refs" / "heads" / "main.lock").write_text("stale\n")
    before = folder_state(vault_path)
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path, key=generate_key())
    assert folder_state(vault_path) == before
    reopened = Vault.open(vault_path, key=key)  # a read never writes, and main stays where the operator put it
    assert reopened.read("/memories/a.txt") == "hello\n"
    assert git(vault_path, "rev-parse", "main").strip() == head
    assert folder_state(vault_path) == before


def test_passphrase_on_a_key_vault_is_a_clear_bad_key_error(used_vault: Vault, vault_path: Path) -> None:
    with pytest.raises(BadKeyError) as info:
        Vault.open(vault_path, passphrase="hunter2")
    assert "its key or key file" in str(info.value)


def test_wrong_key_does_not_work_through_the_environment_either(
    used_vault: Vault, vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, generate_key())
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path)


# -- not a vault ------------------------------------------------------------------


def test_missing_folder_is_not_a_vault(tmp_path: Path, key: str) -> None:
    with pytest.raises(NotAVaultError):
        Vault.open(tmp_path / "nowhere", key=key)
    assert not (tmp_path / "nowhere").exists()


def test_empty_folder_is_not_a_vault(tmp_path: Path, key: str) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAVaultError):
        Vault.open(tmp_path / "empty", key=key)
    assert list((tmp_path / "empty").iterdir()) == []


def test_plain_file_is_not_a_vault(tmp_path: Path, key: str) -> None:
    (tmp_path / "file").write_text("hello")
    with pytest.raises(NotAVaultError):
        Vault.open(tmp_path / "file", key=key)
    assert (tmp_path / "file").read_text() == "hello"


def test_working_git_repository_is_not_a_vault(tmp_path: Path, key: str) -> None:
    repo = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(NotAVaultError):
        Vault.open(repo, key=key)


def test_bare_repository_without_keyring_is_not_a_vault(tmp_path: Path, key: str) -> None:
    repo = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    with pytest.raises(NotAVaultError):
        Vault.open(repo, key=key)


def test_folder_inside_a_vault_is_not_a_vault(used_vault: Vault, vault_path: Path, key: str) -> None:
    with pytest.raises(NotAVaultError):
        Vault.open(vault_path / "objects", key=key)


def test_not_a_vault_is_reported_before_key_problems(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAVaultError):
        Vault.open(tmp_path / "empty", key="not a key")


# -- init ------------------------------------------------------------------------


def test_init_refuses_a_non_empty_folder(tmp_path: Path, key: str) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    with pytest.raises(VaultError):
        Vault.init(folder, key=key)
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]
    assert (folder / "keep.txt").read_text() == "precious"


def test_init_refuses_an_existing_vault(used_vault: Vault, vault_path: Path, key: str) -> None:
    before = folder_state(vault_path)
    with pytest.raises(VaultError):
        Vault.init(vault_path, key=generate_key())
    assert folder_state(vault_path) == before
    assert Vault.open(vault_path, key=key).read("/memories/a.txt") == "bye\n"


def test_init_refuses_a_plain_file(tmp_path: Path, key: str) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(VaultError):
        Vault.init(tmp_path / "f", key=key)
    assert (tmp_path / "f").read_text() == "x"


def test_init_accepts_an_empty_existing_folder(tmp_path: Path, key: str) -> None:
    (tmp_path / "empty").mkdir()
    Vault.init(tmp_path / "empty", key=key)
    assert Vault.open(tmp_path / "empty", key=key).history() == []
    assert commit_count(tmp_path / "empty") == 0


# -- key sources ------------------------------------------------------------------


def _roundtrip(vault_path: Path, **source) -> str:
    """Open with ``source``, write, and read back through a second open."""
    opened = Vault.open(vault_path, **source)
    name = f"/memories/k{len(opened.history())}.txt"
    VaultMemoryTool(opened, actor="t").call({"command": "create", "path": name, "file_text": "ok"})
    return Vault.open(vault_path, **source).read(name)


def test_key_from_environment_variable(tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEY, key)
    Vault.init(tmp_path / "v")
    monkeypatch.delenv(ENV_KEY)
    assert Vault.open(tmp_path / "v", key=key).history() == []
    monkeypatch.setenv(ENV_KEY, key)
    assert _roundtrip(tmp_path / "v") == "ok"


def test_explicit_key_wins_over_the_environment(
    used_vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, generate_key())
    assert Vault.open(vault_path, key=key).read("/memories/a.txt") == "bye\n"


def test_malformed_environment_key_names_the_variable(
    used_vault: Vault, vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEY, "correct horse battery staple")
    with pytest.raises(BadKeyError) as info:
        Vault.open(vault_path)
    assert ENV_KEY in str(info.value)


def test_no_key_at_all_is_a_bad_key_error(used_vault: Vault, vault_path: Path) -> None:
    with pytest.raises(BadKeyError) as info:
        Vault.open(vault_path)
    assert ENV_KEY in str(info.value)


def _key_file(tmp_path: Path, key: str, mode: int) -> Path:
    path = tmp_path / f"key-{mode:o}"
    path.write_text(key + "\n")
    path.chmod(mode)
    return path


def test_key_file_with_mode_0600_is_accepted(used_vault: Vault, vault_path: Path, tmp_path: Path, key: str) -> None:
    assert _roundtrip(vault_path, key_file=_key_file(tmp_path, key, 0o600)) == "ok"
    assert _roundtrip(vault_path, key_file=str(_key_file(tmp_path, key, 0o400))) == "ok"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_file_readable_by_others_is_refused(
    used_vault: Vault, vault_path: Path, tmp_path: Path, key: str, mode: int
) -> None:
    with pytest.raises(BadKeyError) as info:
        Vault.open(vault_path, key_file=_key_file(tmp_path, key, mode))
    assert "chmod" in str(info.value)
    assert key not in str(info.value)


def test_key_file_refusal_also_applies_at_init(tmp_path: Path, key: str) -> None:
    with pytest.raises(BadKeyError):
        Vault.init(tmp_path / "v", key_file=_key_file(tmp_path, key, 0o644))
    assert not (tmp_path / "v").exists() or not any((tmp_path / "v").iterdir())


def test_missing_key_file_is_a_bad_key_error(used_vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    with pytest.raises(BadKeyError):
        Vault.open(vault_path, key_file=tmp_path / "no-such-key")


def test_key_file_with_a_wrong_key_is_a_wrong_key_error(used_vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    with pytest.raises(WrongKeyError):
        Vault.open(vault_path, key_file=_key_file(tmp_path, generate_key(), 0o600))


def test_passphrase_vault_opens_with_the_right_passphrase_only(tmp_path: Path) -> None:
    folder = tmp_path / "pp"
    vault = Vault.init(folder, passphrase="correct horse battery staple")
    VaultMemoryTool(vault, actor="t").call({"command": "create", "path": "/memories/p.txt", "file_text": "pp"})
    assert Vault.open(folder, passphrase="correct horse battery staple").read("/memories/p.txt") == "pp"
    with pytest.raises(WrongKeyError):
        Vault.open(folder, passphrase="correct horse battery stapler")
    with pytest.raises(WrongKeyError):
        Vault.open(folder, key=generate_key())
    keyring = git(folder, "cat-file", "blob", f"{KEYRING_REF}:keyring.json")
    assert "scrypt" in keyring and "correct horse" not in keyring


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "short",
        "x" * 44,
        "q7Gc2xM9kFz0bW1pL3nR8tY5vH4jD6sA2eU0iO9y",  # a key cut short
        base64.urlsafe_b64encode(b"k" * 31).decode(),
        "🔑" * 44,
    ],
)
def test_malformed_key_string_is_a_bad_key_error(used_vault: Vault, vault_path: Path, bad: str) -> None:
    with pytest.raises(BadKeyError):
        Vault.open(vault_path, key=bad)


def test_malformed_key_refused_at_init_without_creating_anything(tmp_path: Path) -> None:
    with pytest.raises(BadKeyError):
        Vault.init(tmp_path / "v", key="not-a-key")
    assert not (tmp_path / "v").exists()


def test_non_string_key_is_a_bad_key_error(used_vault: Vault, vault_path: Path, key: str) -> None:
    with pytest.raises(BadKeyError):
        Vault.open(vault_path, key=key.encode())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sources",
    [("key", "passphrase"), ("key", "key_file"), ("key_file", "passphrase"), ("key", "key_file", "passphrase")],
)
def test_two_key_sources_at_once_are_refused(
    used_vault: Vault, vault_path: Path, tmp_path: Path, key: str, sources: tuple[str, ...]
) -> None:
    given = {"key": key, "key_file": _key_file(tmp_path, key, 0o600), "passphrase": "pw"}
    chosen = {name: given[name] for name in sources}
    with pytest.raises(BadKeyError):
        Vault.open(vault_path, **chosen)
    with pytest.raises(BadKeyError):
        Vault.init(tmp_path / "new", **chosen)
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").iterdir())


# -- the keyring ---------------------------------------------------------------------


def all_object_bytes(vault_path: Path) -> bytes:
    return subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "--batch-all-objects", "--batch"], capture_output=True, check=True
    ).stdout


def test_keyring_ref_holds_only_wrapped_keys(used_vault: Vault, vault_path: Path, key: str) -> None:
    assert KEYRING_REF != "refs/heads/main"
    assert git(vault_path, "ls-tree", "-r", "--name-only", KEYRING_REF).split() == ["keyring.json"]
    # The keyring is its own history, never part of main's.
    assert git(vault_path, "merge-base", KEYRING_REF, "main", check=False) == ""
    assert git(vault_path, "ls-tree", "--name-only", "main").split() == ["memories"]
    everything = all_object_bytes(vault_path) + b"".join(p.read_bytes() for p in vault_path.rglob("*") if p.is_file())
    raw_user = base64.urlsafe_b64decode(key)
    assert key.encode() not in everything
    assert key.rstrip("=").encode() not in everything
    assert raw_user not in everything
    for data_key in used_vault.keyring.keys.values():
        secrets = [data_key.seal_key]
        if data_key.fernet is not None:  # format 1
            secrets.append(data_key.fernet._signing_key + data_key.fernet._encryption_key)
        for secret in secrets:
            raw = base64.urlsafe_b64encode(secret)
            assert secret not in everything
            assert raw not in everything
            assert raw.rstrip(b"=") not in everything
    for cover in used_vault.keyring.covers.values():  # format 2: the epochs' key trees
        for node in cover.values():
            assert node not in everything
            assert base64.urlsafe_b64encode(node).rstrip(b"=") not in everything


def test_keyring_is_not_on_main_and_main_is_unborn_until_first_write(tmp_path: Path, key: str) -> None:
    folder = tmp_path / "fresh"
    Vault.init(folder, key=key)
    assert git(folder, "for-each-ref", "--format=%(refname)").split() == [KEYRING_REF]
    assert commit_count(folder) == 0


def test_opening_a_regular_file_as_a_vault_says_it_is_a_file(tmp_path: Path, key: str) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a vault")
    with pytest.raises(NotAVaultError) as info:
        Vault.open(plain, key=key)
    message = str(info.value)
    assert message.startswith("Error: ") and "is a file, not a folder" in message, message
    assert "no such folder" not in message
    assert plain.read_text() == "not a vault"


def test_a_plain_git_clone_of_a_vault_is_refused_with_the_way_to_clone_it(
    used_vault: Vault, vault_path: Path, tmp_path: Path, key: str
) -> None:
    """`git clone VAULT DIR` makes a working copy, whose keyring is only a
    remote-tracking branch: the error says how to make a clone vaultmem opens."""
    subprocess.run(["git", "clone", "-q", str(vault_path), str(tmp_path / "copy")], check=True)
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(tmp_path / "copy", key=key)
    said = str(refused.value)
    assert "working copy" in said and "vaultmem clone" in said and "git clone --bare" in said


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (["init", "-q", "--bare", "--object-format=sha256"], "sha256 object ids (extensions.objectFormat)"),
        (["config", "extensions.refStorage", "reftable"], "reftable ref storage (extensions.refStorage)"),
    ],
    ids=["sha256", "reftable"],
)
def test_a_git_repository_of_a_kind_vaultmem_cannot_use_is_named_as_such(
    tmp_path: Path, key: str, setup: list[str], words: str
) -> None:
    folder = tmp_path / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(folder)], check=True)
    if setup[0] == "config":
        git(folder, "config", "core.repositoryformatversion", "1")
        git(folder, *setup)
    else:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
        subprocess.run(["git", *setup, str(folder)], check=True)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(folder, key=key)
    assert f"it is a git repository with {words}, which vaultmem does not use" in str(refused.value)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
