"""A full disk during the writes vaultmem makes besides the memory commands:
the MCP server's token file, a signed checkpoint appended to a file, key
rotation and key change.  A refused write is a clean vaultmem error, leaves
nothing behind, and once space is back the same command succeeds.

The full disk is a small tmpfs mounted for the test (the suite runs as root
here; without permission to mount, these tests are skipped, saying so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from stockgit_helpers import fsck_strict, rev

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.errors import VaultError
from vaultmem.git import commits
from vaultmem.mcp.web import load_or_make_token


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False, cwd=cwd, timeout=60)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "-m", "vaultmem", *args, cwd=cwd)


def _mount(mount_point: Path, size: str) -> Iterator[Path]:
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here to make a small tmpfs disk")
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point))
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if _run("umount", str(mount_point)).returncode != 0:
            _run("umount", "-l", str(mount_point))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB disk for files beside a vault kept elsewhere."""
    yield from _mount(tmp_path / "tiny", "1m")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """Room for a vault and whatever vaultmem preallocates; then filled up."""
    yield from _mount(tmp_path / "disk", "32m")


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(disk: Path, leave: int = 0) -> None:
    """Fill the disk with one file, leaving ``leave`` bytes free."""
    with open(disk / "filler", "ab") as filler:
        remaining = free_bytes(disk) - leave
        while remaining > 0:
            try:
                remaining -= filler.write(b"\0" * min(remaining, 1 << 20))
            except OSError:
                break
    assert free_bytes(disk) <= leave


# -- the MCP server's token file ----------------------------------------------------------


def test_the_mcp_token_file_on_a_full_disk_is_a_clear_refusal_that_leaves_no_empty_file(
    tiny_disk: Path, tmp_path: Path
) -> None:
    """It was a raw "[Errno 28] No space left on device" and an empty token
    file, which then refused every start ("shorter than 32 characters")
    until someone removed it by hand."""
    token_file = tiny_disk / "mcp-token"
    fill(tiny_disk)
    with pytest.raises(VaultError) as refused:
        load_or_make_token(token_file)
    assert str(refused.value).startswith("Error: cannot write the token file"), str(refused.value)
    assert "Free space" in str(refused.value)
    assert not token_file.exists()

    key_file = tmp_path / "key"
    key_file.write_text(generate_key() + "\n")
    key_file.chmod(0o600)
    vault = str(tmp_path / "v.vault")
    assert _cli("--vault", vault, "--key-file", str(key_file), "init").returncode == 0
    served = _cli(
        "--vault", vault, "--key-file", str(key_file), "mcp", "--http", "--port", "1", "--token-file", str(token_file)
    )
    assert served.returncode == 2, served.stderr
    assert served.stderr.startswith("vaultmem: cannot write the token file"), served.stderr
    assert "Traceback" not in served.stderr and "Errno" not in served.stderr
    assert not token_file.exists()

    (tiny_disk / "filler").unlink()
    token = load_or_make_token(token_file)
    assert len(token) >= 32
    assert load_or_make_token(token_file) == token


# -- a checkpoint appended to a file --------------------------------------------------------


def test_a_checkpoint_that_does_not_fit_leaves_the_checkpoint_file_as_it_was(tiny_disk: Path, tmp_path: Path) -> None:
    """A checkpoint appended to a file on a full disk was written in part:
    the file then failed `verify --checkpoint` ("the checkpoint of ... is not
    signed"), a finding that stays until someone edits the file by hand."""
    key_file = tmp_path / "key"
    key_file.write_text(generate_key() + "\n")
    key_file.chmod(0o600)
    vault = ["--vault", str(tmp_path / "v.vault"), "--key-file", str(key_file)]
    signed = [*vault, "--signing-key", str(tmp_path / "ops.key")]
    assert _cli(*vault, "init").returncode == 0
    assert _cli("signer", "new", "ops", "--out", str(tmp_path / "ops.key")).returncode == 0
    added = _cli(*signed, "signer", "add", "ops", str(tmp_path / "ops.key.pub"), "--operator", "--actor", "ops")
    assert added.returncode == 0, added.stderr
    made = _cli(*vault, "call", '{"command": "create", "path": "/memories/a.md", "file_text": "a\\n"}')
    assert made.returncode == 0, made.stderr

    first = _cli(*signed, "checkpoint", "--actor", "ops", "--out", str(tmp_path / "first.txt"))
    assert first.returncode == 0, first.stderr
    text = (tmp_path / "first.txt").read_bytes()
    # notes before the first checkpoint, so the file ends 100 bytes short of a page:
    # the next checkpoint fits only in part
    page = os.statvfs(tiny_disk).f_frsize
    notes = b"# checkpoints of the agent vault\n"
    padding = page - 100 - len(text)
    assert padding > 0
    checkpoints = tiny_disk / "checkpoints.txt"
    checkpoints.write_bytes((notes * (padding // len(notes) + 1))[:padding] + text)
    before = checkpoints.read_bytes()
    assert _cli(*vault, "verify", "--checkpoint", str(checkpoints)).returncode == 0

    fill(tiny_disk)
    refused = _cli(*signed, "checkpoint", "--actor", "ops", "--out", str(checkpoints))
    assert refused.returncode == 2, refused.stderr
    checked = _cli(*vault, "verify", "--checkpoint", str(checkpoints))
    assert checked.returncode == 0, checked.stdout + checked.stderr  # was: "bad signature: ... is not signed"
    assert checkpoints.read_bytes() == before
    assert "the file is as it was" in refused.stderr and "Traceback" not in refused.stderr

    new_file = tiny_disk / "new.txt"
    refused = _cli(*signed, "checkpoint", "--actor", "ops", "--out", str(new_file))
    assert refused.returncode == 2, refused.stderr
    assert not new_file.exists()

    (tiny_disk / "filler").unlink()
    again = _cli(*signed, "checkpoint", "--actor", "ops", "--out", str(checkpoints))
    assert again.returncode == 0, again.stderr
    assert checkpoints.read_bytes().startswith(before)
    checked = _cli(*vault, "verify", "--checkpoint", str(checkpoints))
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- key rotation and key change refused on a full disk ---------------------------------------


def _vault_with_a_file(disk: Path) -> tuple[Vault, VaultMemoryTool, str]:
    key = generate_key()
    vault = Vault.init(disk / "agent.vault", key=key)
    tool = VaultMemoryTool(vault, actor="agent")
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "a\n"})
    vault.close()  # its upkeep done: nothing frees space while the disk fills
    return vault, tool, key


def test_a_refused_key_rotation_does_not_encrypt_later_writes_under_a_key_never_stored(small_disk: Path) -> None:
    """The open vault kept the data key whose keyring write was refused and
    encrypted the next writes under it: once reopened, those files failed
    authentication, lost."""
    vault, tool, key = _vault_with_a_file(small_disk)
    fill(small_disk)
    with pytest.raises(VaultError):
        vault.rotate_key()
    (small_disk / "filler").unlink()
    tool.call({"command": "create", "path": "/memories/b.md", "file_text": "b\n"})
    vault.close()
    with Vault.open(small_disk / "agent.vault", key=key) as reopened:
        assert reopened.read("/memories/b.md") == "b\n"  # was: "failed authentication", the file lost
        assert reopened.verify().ok
    fsck_strict(small_disk / "agent.vault")


def test_a_refused_key_change_can_be_run_again_on_the_same_vault(small_disk: Path) -> None:
    """The open vault kept the rewrapped keyring whose write was refused: run
    again, the key change said another process had changed a key."""
    vault, _tool, key = _vault_with_a_file(small_disk)
    new_key = generate_key()
    fill(small_disk)
    with pytest.raises(VaultError):
        vault.change_key(key=new_key)
    (small_disk / "filler").unlink()
    vault.change_key(key=new_key)  # was: ConflictError "another process changed a key"
    vault.close()
    with Vault.open(small_disk / "agent.vault", key=new_key) as reopened:
        assert reopened.read("/memories/a.md") == "a\n"
    with pytest.raises(VaultError):
        Vault.open(small_disk / "agent.vault", key=key)


def test_a_reencryption_refused_after_the_new_key_is_stored_does_not_say_nothing_changed(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, _tool, _key = _vault_with_a_file(small_disk)
    ring_before = rev(vault.path, "refs/heads/vaultmem-keyring")
    moved: list[str] = []

    def fill_after_the_keyring_moves(name: str) -> None:
        if name == "unkept" and not moved:
            moved.append(name)
            fill(small_disk)

    monkeypatch.setattr(commits, "on_step", fill_after_the_keyring_moves)
    with pytest.raises(VaultError) as refused:
        vault.rotate_key(reencrypt=True, actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    (small_disk / "filler").unlink()
    vault.close()
    assert rev(vault.path, "refs/heads/vaultmem-keyring") != ring_before  # the new key was stored
    assert "nothing was changed" not in str(refused.value), str(refused.value)


def test_the_next_write_of_the_same_vault_finishes_an_erasure_the_full_disk_cut_short(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    vault = Vault.init(small_disk / "agent.vault", key=key)
    tool = VaultMemoryTool(vault, actor="agent")
    tool.call({"command": "create", "path": "/memories/ada.md", "file_text": "ada@example.com\n"})
    tool.call({"command": "create", "path": "/memories/other.md", "file_text": "other\n"})
    vault.close()
    filled: list[str] = []

    def fill_once_the_erasure_commit_moves(name: str) -> None:
        if name == "moved" and not filled:
            filled.append(name)
            fill(small_disk)

    monkeypatch.setattr(commits, "on_step", fill_once_the_erasure_commit_moves)
    with pytest.raises(VaultError) as refused:
        vault.forget("/memories/ada.md", reason="GDPR request 4411")
    monkeypatch.setattr(commits, "on_step", None)
    assert "the erasure is recorded" in str(refused.value), str(refused.value)
    (small_disk / "filler").unlink()
    tool.call({"command": "create", "path": "/memories/next.md", "file_text": "n\n"})  # docs/erasure.md: finishes it
    vault.close()
    with Vault.open(small_disk / "agent.vault", key=key) as reopened:
        report = reopened.verify()
        assert report.ok, report.findings  # was: "listed as erased but its key still exists"


def test_sealing_names_refused_after_the_name_key_is_stored_says_what_was_made(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, _tool, _key = _vault_with_a_file(small_disk)
    filled: list[str] = []

    def fill_once_the_name_key_is_stored(name: str) -> None:
        if name == "seal-names-keyring" and not filled:
            filled.append(name)
            fill(small_disk)

    monkeypatch.setattr(commits, "on_step", fill_once_the_name_key_is_stored)
    with pytest.raises(VaultError) as refused:
        vault.migrate(sealed_names=True, actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    message = str(refused.value)
    assert "nothing was changed" not in message, message
    assert message.startswith("Error: the vault's name key is stored, but the current files were not moved"), message
    (small_disk / "filler").unlink()
    assert vault.migrate(sealed_names=True, actor="ops") is True  # run again, it finishes
    assert vault.read("/memories/a.md") == "a\n"
    assert vault.verify().ok
