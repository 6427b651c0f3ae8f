"""Ctrl-C (SIGINT, a KeyboardInterrupt in Python) at any step of a write:
the signal is held while the ref moves, so the vault is whole either way and
the next write works.  Real vault, real signals, stock git to check."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.errors import BusyError
from vaultmem.git import commits

STEPS = ("locked", "kept", "durable", "ref-locked", "moved", "unkept")


def fsck(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(path), "fsck", "--strict"], capture_output=True, text=True)


@pytest.mark.parametrize("step", STEPS)
def test_ctrl_c_at_any_step_of_a_write_leaves_the_vault_whole(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    vault = Vault.init(tmp_path / "v.vault", key=key)
    tool = VaultMemoryTool(vault, actor="agent", session="s")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})

    def interrupt(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGINT)  # handled at the next instruction of this thread

    monkeypatch.setattr(commits, "on_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "two\n"})
    monkeypatch.setattr(commits, "on_step", None)
    assert not (vault.path / "refs" / "heads" / "main.lock").exists()
    checked = fsck(vault.path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "three\n"})
    vault.close()
    with Vault.open(tmp_path / "v.vault", key=key) as again:
        assert again.read("/memories/a.txt") == "one\n" and again.read("/memories/c.txt") == "three\n"
        assert again.verify().ok
    assert fsck(tmp_path / "v.vault").returncode == 0


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    """SIGINT the moment the ref lock is made (``lock``) or the ref is
    renamed into place (``rename``): the signal's handler runs at the next
    instruction, inside the write's last steps."""
    if which == "rename":
        real_rename = os.rename

        def rename(src: str, dst: str) -> None:
            real_rename(src, dst)
            if str(dst).endswith(os.path.join("refs", "heads", "main")):
                os.kill(os.getpid(), signal.SIGINT)

        monkeypatch.setattr(os, "rename", rename)
    else:
        real_link = commits.CommitPath._link

        def link(self: commits.CommitPath, made: int | str, path: str) -> None:
            real_link(self, made, path)
            if path.endswith("main.lock"):
                os.kill(os.getpid(), signal.SIGINT)

        monkeypatch.setattr(commits.CommitPath, "_link", link)


@pytest.mark.parametrize("which", ["lock", "rename"])
def test_ctrl_c_as_the_ref_moves_leaves_the_vault_whole_and_the_write_kept(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the interrupt right after the ref lock was made left
    ``main.lock`` behind (every later write refused), and right after the
    rename voided the journal and removed the pack ``main`` named."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v.vault", key=key)
    tool = VaultMemoryTool(vault, actor="agent", session="s")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    with monkeypatch.context() as patched:
        _interrupt_after(patched, which)
        with pytest.raises(KeyboardInterrupt):
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "two\n"})
    assert not (vault.path / "refs" / "heads" / "main.lock").exists()
    checked = fsck(vault.path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert vault.read("/memories/b.txt") == "two\n"  # the write was made whole: only its answer was lost
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "three\n"})
    vault.close()
    with Vault.open(tmp_path / "v.vault", key=key) as again:
        assert again.read("/memories/b.txt") == "two\n" and again.verify().ok
    assert fsck(tmp_path / "v.vault").returncode == 0


def test_a_handler_of_the_applications_own_still_runs_once_after_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An application's own SIGINT handler is called (once) when the ref has
    moved, and is the handler again afterwards."""
    calls: list[int] = []

    def mine(signum: int, frame: object) -> None:
        calls.append(signum)

    previous = signal.signal(signal.SIGINT, mine)
    try:
        vault = Vault.init(tmp_path / "v.vault", key=generate_key())
        tool = VaultMemoryTool(vault, actor="agent", session="s")

        def interrupt(name: str) -> None:
            if name == "ref-locked":
                os.kill(os.getpid(), signal.SIGINT)
                assert calls == []  # held while the ref moves

        monkeypatch.setattr(commits, "on_step", interrupt)
        assert tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "two\n"}).startswith(
            "File created"
        )
        assert calls == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is mine
        assert vault.read("/memories/b.txt") == "two\n"
        vault.close()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_waiting_for_gits_lock_stops_the_write_at_once(tmp_path: Path) -> None:
    """While another program holds ``main.lock``, nothing of the write is
    half done: a Ctrl-C then is not held until the wait ends (BusyError),
    and the write is not made."""
    import threading

    vault = Vault.init(tmp_path / "v.vault", key=generate_key())
    tool = VaultMemoryTool(vault, actor="agent", session="s")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    lock = vault.path / "refs" / "heads" / "main.lock"
    lock.write_text("0" * 40 + "\n")  # a git command's lock, mode 0644
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "two\n"})
    finally:
        timer.cancel()
    assert not isinstance(raised.value.__context__, BusyError)  # not raised after the wait ended
    assert lock.read_text() == "0" * 40 + "\n"  # git's lock is git's
    lock.unlink()
    assert [e.path for e in vault.listing("/memories") if e.kind == "file"] == ["/memories/a.txt"]
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "three\n"})
    vault.close()
    assert fsck(tmp_path / "v.vault").returncode == 0
