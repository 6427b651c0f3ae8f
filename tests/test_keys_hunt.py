"""Key administration as operators meet it: a keyring edited with stock git,
key changes and exports that fail part way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultError, VaultMemoryTool
from vaultmem.core.crypto import ENV_KEY
from vaultmem.repo.keys import KEYRING_REF

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv("VAULTMEM_PASSPHRASE", raising=False)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _tamper_protector(vault_path: Path, tmp_path: Path, **changes: object) -> None:
    """Edit the keyring's passphrase settings with stock git, as anyone with
    write access to the repository (or a remote) can."""
    work = tmp_path / "keyring-work"
    subprocess.run(
        ["git", "clone", "-q", "-b", KEYRING_REF.removeprefix("refs/heads/"), str(vault_path), str(work)],
        check=True,
        capture_output=True,
    )
    doc = json.loads((work / "keyring.json").read_text())
    doc["protector"].update(changes)
    (work / "keyring.json").write_text(json.dumps(doc, sort_keys=True, indent=2))
    _git(work, "commit", "-qam", "tune scrypt")
    _git(work, "push", "-q", "-f", str(vault_path), f"HEAD:{KEYRING_REF}")


@pytest.fixture
def pass_vault(tmp_path: Path) -> Path:
    path = tmp_path / "p.vault"
    vault = Vault.init(path, passphrase=PASSPHRASE)
    VaultMemoryTool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"})
    vault.close()
    return path


@pytest.mark.parametrize(
    "changes",
    [
        {"n": 2**40},  # needs a terabyte of memory
        {"n": 2},  # a downgrade: scrypt that costs nothing
        {"r": 1, "n": 2**10},
        {"n": 3 * 2**14},  # not a power of two
        {"n": True},
        {"kdf": "pbkdf2"},
        {"salt": "AAAA"},  # 3 bytes of salt
    ],
)
def test_open_refuses_tampered_passphrase_settings(
    pass_vault: Path, tmp_path: Path, changes: dict[str, object]
) -> None:
    _tamper_protector(pass_vault, tmp_path, **changes)
    with pytest.raises(VaultError) as caught:
        Vault.open(pass_vault, passphrase=PASSPHRASE)
    message = str(caught.value)
    assert message.startswith("Error: the vault's keyring has passphrase settings")
    assert "\n" not in message


def test_cli_refuses_costly_passphrase_settings_without_hanging(pass_vault: Path, tmp_path: Path) -> None:
    """p=2**20 made every open run scrypt a million times over (hours)."""
    _tamper_protector(pass_vault, tmp_path, p=2**20)
    env = {**os.environ, "VAULTMEM_PASSPHRASE": PASSPHRASE}
    env.pop(ENV_KEY, None)
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(pass_vault), "ls"],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,  # a guard against the hang, not a speed check
    )
    assert done.returncode != 0
    assert "passphrase settings" in done.stderr
    assert "Traceback" not in done.stderr
    assert str(tmp_path) not in done.stderr


def test_untampered_passphrase_vault_still_opens(pass_vault: Path) -> None:
    vault = Vault.open(pass_vault, passphrase=PASSPHRASE)
    assert "alpha" in VaultMemoryTool(vault).call({"command": "view", "path": "/memories/a.txt"})


def _limited_export(vault_path: Path, key: str, folder: Path, max_bytes: int) -> subprocess.CompletedProcess[str]:
    """``vaultmem export`` in a process that may write only ``max_bytes`` per
    file, as on a full disk (the write fails with EFBIG, as ENOSPC would)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    env = {**os.environ, ENV_KEY: key}
    env.pop("VAULTMEM_PASSPHRASE", None)
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "export", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit,
        timeout=150,
    )


def test_export_to_a_full_disk_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    from vaultmem import generate_key

    key = generate_key()
    vault_path = tmp_path / "e.vault"
    vault = Vault.init(vault_path, key=key)
    tool = VaultMemoryTool(vault)
    tool.call({"command": "create", "path": "/memories/a/small.txt", "file_text": "secret\n"})
    tool.call({"command": "create", "path": "/memories/big.txt", "file_text": "x" * 100_000})
    vault.close()
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    done = _limited_export(vault_path, key, out, 50_000)
    assert done.returncode != 0
    err = done.stderr.strip()
    assert "\n" not in err
    assert "[Errno" not in err and "Traceback" not in err
    assert "nothing was written" in err
    assert "space" in err
    assert sorted(p.name for p in out.rglob("*")) == ["notes.txt"]


def test_plaintext_left_by_a_killed_export_is_removed_by_the_next(tmp_path: Path) -> None:
    """An export killed (SIGKILL, power cut) while writing leaves its private
    staging folder of plaintext files; the next export into the same folder
    removes it, and never one an export still running is writing."""
    import signal
    import time

    from vaultmem import generate_key

    key = generate_key()
    vault_path = tmp_path / "e.vault"
    vault = Vault.init(vault_path, key=key)
    source = tmp_path / "src" / "memories"
    for i in range(3000):
        (source / f"d{i % 30}").mkdir(parents=True, exist_ok=True)
        (source / f"d{i % 30}" / f"f{i}.txt").write_text(f"secret {i}\n")
    from vaultmem.ops.transfer import import_folder

    import_folder(vault, source.parent)
    vault.close()
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, ENV_KEY: key}
    env.pop("VAULTMEM_PASSPHRASE", None)
    args = [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "export", str(out)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while proc.poll() is None and not any(p.is_file() for p in out.glob(".vaultmem-export-*/*/*")):
            time.sleep(0.001)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the export finished before it could be killed")
    leftovers = list(out.glob(".vaultmem-export-*"))
    assert list(out.glob(".vaultmem-export-*/*/*"))  # what a killed export leaves
    for leftover in leftovers:  # killed a while ago
        os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    # a second export into the same folder, while another export is still running there
    lingering = out / ".vaultmem-export-running"
    lingering.mkdir(mode=0o700)
    import fcntl

    holder = os.open(lingering, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (lingering / "busy.txt").write_text("in progress\n")
        os.utime(lingering, (time.time() - 3600, time.time() - 3600))  # a long export
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, done.stderr
        left = sorted(p.name for p in out.iterdir())
        assert left == [".vaultmem-export-running", "memories"]
        assert (lingering / "busy.txt").exists()
    finally:
        os.close(holder)
    assert len(list((out / "memories").rglob("*.txt"))) == 3000
