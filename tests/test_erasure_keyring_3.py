"""Erasure against a keyring put back with stock git: an operator restores
the keyring from before an erasure (from a saved id and a backup bundle, or
from a clone made before it), or git keeps a copy of it where no ref names it.

Real vaults, real keys, stock git; the key scan is the one of test_erasure."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from conftest import git
from test_erasure import MARKER, all_objects, assert_no_key_left, every_file_bytes, inflated, keyring_docs, write

from vaultmem import Vault, generate_key
from vaultmem.core.crypto import Keyring, UserKey
from vaultmem.errors import ErasedError, VaultError, WrongKeyError

KEYRING = "refs/heads/vaultmem-keyring"


def _erase_after_a_backup(vault: Vault, vault_path: Path, tmp_path: Path) -> tuple[str, list[bytes]]:
    """ada.md (two versions) and other.md; a bundle of the vault taken, then
    ada.md forgotten.  The keyring id from before and the erased blobs."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="str_replace", path="/memories/ada.md", old_str="email", new_str="mail")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    old = git(vault_path, "rev-parse", KEYRING).strip()
    git(vault_path, "bundle", "create", "--quiet", str(tmp_path / "backup.bundle"), "--all")
    listed = vault.forget("/memories/ada.md", reason="look", dry_run=True).versions
    blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops-alice")
    return old, blobs


def _put_back(vault_path: Path, tmp_path: Path, old: str) -> None:
    """The keyring from before the erasure, back under its own name."""
    git(vault_path, "fetch", "--quiet", str(tmp_path / "backup.bundle"), f"{KEYRING}:refs/heads/restored")
    git(vault_path, "update-ref", KEYRING, old)
    git(vault_path, "update-ref", "-d", "refs/heads/restored")


def test_a_keyring_put_back_from_before_an_erasure_reads_nothing_it_erased(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """`git update-ref` of the keyring to its id from before the erasure (its
    objects back from a bundle): the vault opened on it and `cat --at` read
    the erased version again."""
    old, _ = _erase_after_a_backup(vault, vault_path, tmp_path)
    _put_back(vault_path, tmp_path, old)

    reopened = Vault.open(vault_path, key=key)
    for at in ("main~1", "main~3"):  # both versions of ada.md
        with pytest.raises(ErasedError, match=r"was erased on .* by ops-alice \(GDPR request 4411\)"):
            reopened.read("/memories/ada.md", at=at)
    shown = reopened.diff("main~3", "main~1", "/memories/ada.md")
    assert "erased" in shown and "ada.lovelace" not in shown and "example.com" not in shown
    assert reopened.read("/memories/other.md") == "unrelated\n"
    report = reopened.verify()
    assert [f.kind for f in report.findings] == ["erasure", "erasure"], report.problems
    assert all("the keyring was put back from before it" in p for p in report.problems)


def test_the_next_write_does_not_build_on_a_keyring_put_back(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """The next write on the restored keyring kept it: the erased keys stayed
    in the vault folder for good."""
    old, blobs = _erase_after_a_backup(vault, vault_path, tmp_path)
    _put_back(vault_path, tmp_path, old)

    reopened = Vault.open(vault_path, key=key)
    write(reopened, command="create", path="/memories/new.md", file_text="after\n")

    assert git(vault_path, "rev-parse", KEYRING).strip() != old
    assert_no_key_left(vault_path, key, blobs)
    again = Vault.open(vault_path, key=key)
    assert again.verify().ok
    assert again.read("/memories/new.md") == "after\n"
    assert again.read("/memories/other.md") == "unrelated\n"
    with pytest.raises(ErasedError, match="by ops-alice"):
        again.read("/memories/ada.md", at="main~2")
    checked = subprocess.run(["git", "-C", str(vault_path), "fsck", "--full"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_running_vault_stops_short_of_a_keyring_put_back_under_it(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """A vault open (an MCP server) while the old keyring is put back: its
    next write removes the restored keyring rather than leaving it."""
    old, blobs = _erase_after_a_backup(vault, vault_path, tmp_path)
    _put_back(vault_path, tmp_path, old)

    with pytest.raises(ErasedError):
        vault.read("/memories/ada.md", at="main~1")
    write(vault, command="create", path="/memories/new.md", file_text="after\n")

    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_keyring_fetched_back_from_a_clone_made_before_the_erasure(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """A clone made before the erasure, its keyring forced back over the
    vault's with `git fetch`; the vault's state folder is gone too (a copy
    of the vault made with `git clone --mirror` after the erasure)."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    subprocess.run(["git", "clone", "-q", "--mirror", str(vault_path), str(tmp_path / "old.git")], check=True)
    listed = vault.forget("/memories/ada.md", reason="look", dry_run=True).versions
    blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops-alice")
    copy = tmp_path / "copy.vault"
    subprocess.run(["git", "clone", "-q", "--mirror", str(vault_path), str(copy)], check=True)
    git(copy, "fetch", "--quiet", "--force", str(tmp_path / "old.git"), f"{KEYRING}:{KEYRING}")

    opened = Vault.open(copy, key=key)
    with pytest.raises(ErasedError, match="by ops-alice"):
        opened.read("/memories/ada.md", at="main~1")
    write(opened, command="create", path="/memories/new.md", file_text="after\n")
    assert_no_key_left(copy, key, blobs)


def _a_clone_that_erased_other(vault: Vault, vault_path: Path, key: str, tmp_path: Path) -> Path:
    """ada.md and other.md; a clone of the vault erases other.md, so its
    keyring differs from the vault's and still holds the key of ada.md."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    before = tmp_path / "before.vault"
    subprocess.run(["git", "clone", "-q", "--bare", str(vault_path), str(before)], check=True)
    Vault.open(before, key=key).forget("/memories/other.md", reason="another request", actor="ops")
    return before


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_keyring_no_ref_names_any_more_goes_with_the_erasure(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, when: str
) -> None:
    """A clone's keyring fetched in, then named by nothing: `FETCH_HEAD`
    overwritten by the next fetch.  Its objects stayed in the vault folder,
    unreachable, with the key of the erased version; neither the erasure nor
    `verify` saw them."""
    before = _a_clone_that_erased_other(vault, vault_path, key, tmp_path)
    listed = vault.forget("/memories/ada.md", reason="look", dry_run=True).versions
    blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]

    def fetch_and_forget_it() -> None:
        git(vault_path, "fetch", "--quiet", str(before), "vaultmem-keyring")
        git(vault_path, "fetch", "--quiet", str(before), "main")  # FETCH_HEAD names main now

    if when == "before":
        fetch_and_forget_it()
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops-alice")
    if when == "after":
        fetch_and_forget_it()
        report = Vault.open(vault_path, key=key).verify()
        assert [f.kind for f in report.findings] == ["erasure"], report.problems
        assert "no ref names" in report.problems[0]
        again = Vault.open(vault_path, key=key).forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
        assert again.commit is None and len(again.already) == 1

    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok
    checked = subprocess.run(["git", "-C", str(vault_path), "fsck", "--full"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_keyring_written_by_hand_with_git_goes_with_the_erasure(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """A clone's keyring file copied in with `git hash-object -w`, and a
    commit of it made with `git mktree` and `git commit-tree`: loose objects
    no ref names, which the erasure left behind with the key it destroyed."""
    before = _a_clone_that_erased_other(vault, vault_path, key, tmp_path)
    listed = vault.forget("/memories/ada.md", reason="look", dry_run=True).versions
    blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]
    text = git(before, "cat-file", "blob", "vaultmem-keyring:keyring.json")
    blob = subprocess.run(
        ["git", "-C", str(vault_path), "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "other.json").write_text(text.replace('"active"', '"active" ', 1))
    git(vault_path, "hash-object", "-w", str(tmp_path / "other.json"))  # a copy of it edited by hand
    tree = subprocess.run(
        ["git", "-C", str(vault_path), "mktree"],
        input=f"100644 blob {blob}\tkeyring.json\n",
        capture_output=True,
        text=True,
    ).stdout.strip()
    git(vault_path, "commit-tree", "-m", "kept", tree)

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops-alice")

    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_git_bundle_kept_in_the_vault_folder_is_named(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """`git bundle create agent.vault/backup.bundle --all` before an erasure:
    the bundle holds the keyring from before it, with the key it destroyed,
    inside the vault folder; the erasure and `verify` said nothing of it."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    git(vault_path, "bundle", "create", "--quiet", str(vault_path / "backup.bundle"), "--all")

    result = vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops-alice")

    assert any("backup.bundle" in note for note in result.notes), result.notes
    report = Vault.open(vault_path, key=key).verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.problems
    assert "backup.bundle" in report.problems[0]
    (vault_path / "backup.bundle").unlink()
    assert Vault.open(vault_path, key=key).verify().ok


def _no_key_left_under(folder: Path, user_keys: set[str], erased: list[bytes]) -> None:
    """assert_no_key_left, each keyring found opened with whichever of
    ``user_keys`` wraps it (a key change leaves the one before in the history)."""
    pieces = [all_objects(folder)]
    for _name, data in every_file_bytes(folder):
        pieces.extend(inflated(data) if len(data) < 4 << 20 else [data])
    docs = keyring_docs(pieces)
    assert docs
    for doc in docs:
        rings = []
        for user_key in user_keys:
            with contextlib.suppress(WrongKeyError):
                rings.append(Keyring.unlock(doc, UserKey.from_string(user_key)))  # type: ignore[arg-type]
        assert rings, "a keyring no key given opens"
        for blob in erased:
            with pytest.raises(VaultError):
                rings[0].open_any(blob)


@pytest.mark.parametrize("change", ["rotate", "new user key", "seal names"])
def test_a_key_change_does_not_build_on_a_keyring_put_back(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, change: str
) -> None:
    """`vaultmem key rotate` (or `key change`, or sealing the names) on the
    keyring put back added a commit on top of it: the erased keys went on in
    the keyring's history."""
    old, blobs = _erase_after_a_backup(vault, vault_path, tmp_path)
    _put_back(vault_path, tmp_path, old)

    reopened = Vault.open(vault_path, key=key)
    new_key = key
    if change == "rotate":
        reopened.rotate_key()
    elif change == "seal names":
        if reopened.sealed_names:
            pytest.skip("the vault seals its names already")
        reopened.seal_names(actor="ops")
    else:
        new_key = generate_key()
        reopened.change_key(key=new_key)

    assert old not in git(vault_path, "rev-list", KEYRING).split()
    _no_key_left_under(vault_path, {key, new_key}, blobs)
    again = Vault.open(vault_path, key=new_key)
    assert again.verify().ok
    assert again.read("/memories/other.md") == "unrelated\n"


def test_reading_never_writes_the_record_of_erasures_and_a_writer_keeps_it(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """The state folder's record of main's erasures spares an open reading
    the whole history; only a writer's upkeep brings it up to date, so that
    reading a vault changes none of its files."""
    for n in range(3 * 32):
        write(vault, command="create", path=f"/memories/n{n}.md", file_text=f"{n}\n")
    vault.close()  # its upkeep's rounds are done
    record = vault_path / "vaultmem" / "erasures"
    assert record.exists()
    record.unlink()
    with Vault.open(vault_path, key=key) as reader:
        assert reader.read("/memories/n7.md") == "7\n"
        reader.history(path="/memories/n7.md")
    assert not record.exists()
