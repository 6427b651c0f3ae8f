"""More of what operators do to a vault with stock git and the file system,
and what the vault says afterwards: a damaged pack index or a missing object
under the keyring branch, and a damaged write-ahead journal.  Every refusal is
one line that names what is damaged and how to repair it; after the repair the
vault opens, every acknowledged write is there, and ``git fsck --strict`` and
``verify()`` are clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from stockgit_helpers import fsck_strict, git_out, run_git

from vaultmem import Vault, VaultMemoryTool
from vaultmem.errors import NotAVaultError

FILES = {f"/memories/b{n}.txt": f"note {n}\n" for n in range(3)}


def _written(vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42")
    for path, text in FILES.items():
        tool.call({"command": "create", "path": path, "file_text": text})
    vault.close()


def _pack_holding(vault_path: Path, oid: str) -> Path:
    """The pack whose index lists ``oid`` (``git show-index``)."""
    folder = vault_path / "objects" / "pack"
    for name in sorted(os.listdir(folder)):
        if name.endswith(".idx"):
            with open(folder / name, "rb") as idx:
                listed = subprocess.run(["git", "show-index"], stdin=idx, capture_output=True, text=True, check=True)
            if oid in listed.stdout:
                return folder / (name[: -len(".idx")] + ".pack")
    raise AssertionError(f"no pack holds {oid}")


def _cli(vault_path: Path, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VAULTMEM_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _one_line_error(text: str) -> str:
    assert "Traceback" not in text, text
    lines = [line for line in text.strip().split("\n") if line]
    assert len(lines) == 1, text
    return lines[0]


# -- the keyring's objects damaged --------------------------------------------------------


def test_a_damaged_index_of_the_keyrings_pack_says_which_index_and_how_to_rebuild_it(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """git fsck: "non-monotonic index".  The keyring ref itself is whole, so
    the refusal names the damaged index and git's command that rebuilds it,
    not a damaged ref; after that command the vault opens and is clean."""
    _written(vault)
    ring = git_out(vault_path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    pack = _pack_holding(vault_path, ring)
    index = pack.with_suffix(".idx")
    damaged = bytearray(index.read_bytes())
    damaged[8] ^= 0xFF  # inside the fan-out table
    os.chmod(index, 0o644)
    index.write_bytes(bytes(damaged))
    assert run_git(vault_path, "fsck", "--no-progress").returncode != 0

    with pytest.raises(NotAVaultError) as refused:
        Vault.open(vault_path, key=key)
    message = str(refused.value)
    assert "ref is damaged" not in message
    assert index.name in message and f"git index-pack objects/pack/{pack.name}" in message, message
    assert ring[:10] in message, message

    verify = _cli(vault_path, key, "verify")
    assert verify.returncode != 0
    assert index.name in _one_line_error(verify.stderr)

    # the repair the message names
    index.unlink()
    git_out(vault_path, "index-pack", f"objects/pack/{pack.name}")
    fsck_strict(vault_path)
    reopened = Vault.open(vault_path, key=key)
    for path, text in FILES.items():
        assert reopened.read(path) == text
    report = reopened.verify()
    assert report.ok, report.findings


def test_a_keyring_commit_missing_from_the_objects_is_not_called_a_damaged_ref(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """The keyring's pack gone (a backup that skipped it): the ref names a
    commit the vault does not hold; the refusal says so, names the commit and
    what to do, in one line."""
    _written(vault)
    ring = git_out(vault_path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    pack = _pack_holding(vault_path, ring)
    pack.unlink()
    pack.with_suffix(".idx").unlink()

    with pytest.raises(NotAVaultError) as refused:
        Vault.open(vault_path, key=key)
    message = str(refused.value)
    assert "ref is damaged" not in message
    assert ring[:10] in message and "missing" in message and "git fsck" in message, message
    assert message.startswith("Error:") and "\n" not in message


# -- the write-ahead journal damaged ----------------------------------------------------------


def _damage_journal_header(vault_path: Path) -> None:
    """Both copies of the journal's header overwritten (a disk that returned garbage)."""
    with open(vault_path / "vaultmem" / "journal", "r+b") as journal:
        journal.write(bytes(range(256)) * 16)


WRITES = {
    "tool": lambda v: VaultMemoryTool(v, actor="bot").call(
        {"command": "create", "path": "/memories/new.txt", "file_text": "new\n"}
    ),
    "undo": lambda v: v.undo(actor="ops"),
    "policy": lambda v: v.set_policy(actor="ops", max_files=50),
    "rotate": lambda v: v.rotate_key(actor="ops"),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_beside_a_damaged_journal_is_a_vault_error_that_names_it_and_changes_nothing(
    write: str, vault: Vault, vault_path: Path, key: str
) -> None:
    from anthropic.lib.tools import ToolError

    from vaultmem.errors import VaultError

    _written(vault)
    _damage_journal_header(vault_path)
    heads = git_out(vault_path, "for-each-ref", "--format=%(refname) %(objectname)")
    reopened = Vault.open(vault_path, key=key)
    try:
        WRITES[write](reopened)
    except ToolError as err:
        assert str(err.content).startswith("Error:"), err.content
    except VaultError as err:
        message = str(err)
        assert message.startswith("Error:") and "\n" not in message, message
        assert "vaultmem/journal" in message and "damaged" in message, message
    except OSError as err:
        pytest.fail(f"a raw {type(err).__name__}: {err}")
    else:
        pytest.fail("the write was made beside a journal nobody can read")
    reopened.close()
    assert git_out(vault_path, "for-each-ref", "--format=%(refname) %(objectname)") == heads


def test_verify_reports_a_damaged_journal_and_its_repair_works(vault: Vault, vault_path: Path, key: str) -> None:
    """Reads go on; verify names the damage (writes are refused until it is
    repaired) and the repair its finding gives makes the vault writable again."""
    _written(vault)
    _damage_journal_header(vault_path)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/b1.txt") == FILES["/memories/b1.txt"]
    report = reopened.verify()
    assert not report.ok
    assert [f.detail for f in report.findings if "vaultmem/journal" in f.detail], report.findings
    reopened.close()

    verify = _cli(vault_path, key, "verify")
    assert verify.returncode == 1, verify.stderr
    assert "vaultmem/journal" in verify.stdout and "Traceback" not in verify.stdout + verify.stderr

    (vault_path / "vaultmem" / "journal").rename(vault_path.parent / "journal.damaged")
    again = Vault.open(vault_path, key=key)
    VaultMemoryTool(again, actor="bot").call({"command": "create", "path": "/memories/new.txt", "file_text": "new\n"})
    again.close()
    fsck_strict(vault_path)
    final = Vault.open(vault_path, key=key)
    for path, text in {**FILES, "/memories/new.txt": "new\n"}.items():
        assert final.read(path) == text
    assert final.verify().ok, final.verify().findings


# -- git's packed-refs damaged ------------------------------------------------------------------


def _garble_packed(vault_path: Path, ref: str) -> str:
    """``git pack-refs --all``, then the line of ``ref`` garbled in place (a
    disk that returned other bytes); returns the id the line held."""
    git_out(vault_path, "pack-refs", "--all")
    assert not (vault_path / ref).exists()
    packed = vault_path / "packed-refs"
    lines = packed.read_text(encoding="ascii").split("\n")
    (held,) = [line.split(" ")[0] for line in lines if line.endswith(" " + ref)]
    packed.write_text(
        "\n".join(("zz" * 20 + " " + ref) if line.endswith(" " + ref) else line for line in lines),
        encoding="ascii",
    )
    return held


def test_a_write_beside_a_garbled_packed_main_never_starts_a_new_history(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """main only in packed-refs, its line garbled: reading it as "no main"
    would make the next write a new root commit, and every earlier version
    would leave main's history.  The write is refused (or main repaired from
    the journal first); main's history is never cut."""
    from anthropic.lib.tools import ToolError

    from vaultmem.errors import VaultError

    _written(vault)
    held = _garble_packed(vault_path, "refs/heads/main")
    try:
        reopened = Vault.open(vault_path, key=key)
        VaultMemoryTool(reopened, actor="bot").call(
            {"command": "create", "path": "/memories/new.txt", "file_text": "new\n"}
        )
    except ToolError as err:
        assert str(err.content).startswith("Error:"), err.content
        written = dict(FILES)
    except VaultError as err:
        assert str(err).startswith("Error:") and "\n" not in str(err), str(err)
        written = dict(FILES)
    else:
        written = {**FILES, "/memories/new.txt": "new\n"}
    main = run_git(vault_path, "rev-parse", "--verify", "--quiet", "refs/heads/main").stdout.strip()
    if main and not main.startswith("zz"):
        # repaired or written on top of what main held: every earlier version is still in its history
        assert run_git(vault_path, "merge-base", "--is-ancestor", held, main).returncode == 0
        final = Vault.open(vault_path, key=key)
        for path, text in written.items():
            assert final.read(path) == text
        assert final.verify().ok, final.verify().findings
    else:
        assert written == FILES, "a write was acknowledged but main does not hold it"


@pytest.mark.parametrize("where", ["packed-refs", "loose-file"])
def test_verify_reports_a_garbled_main_as_a_finding(where: str, vault: Vault, vault_path: Path, key: str) -> None:
    """verify never stops at damage: a main that holds no commit id is one
    finding (exit status 1), not an error telling the user to run verify."""
    _written(vault)
    if where == "packed-refs":
        _garble_packed(vault_path, "refs/heads/main")
    else:
        (vault_path / "refs" / "heads" / "main").write_bytes(b"\0" * 41)
    report = Vault.open(vault_path, key=key).verify()
    assert not report.ok
    assert any("refs/heads/main" in f.detail and "commit id" in f.detail for f in report.findings), report.findings

    run = _cli(vault_path, key, "verify")
    assert run.returncode == 1, run.stderr
    assert "refs/heads/main" in run.stdout and "Traceback" not in run.stdout + run.stderr


def test_a_garbled_packed_keyring_is_a_clear_refusal(vault: Vault, vault_path: Path, key: str) -> None:
    _written(vault)
    _garble_packed(vault_path, "refs/heads/vaultmem-keyring")
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(vault_path, key=key)
    message = str(refused.value)
    assert message.startswith("Error: the vault's keyring ref is damaged") and "packed-refs" in message, message
    run = _cli(vault_path, key, "verify")
    assert run.returncode == 2
    line = _one_line_error(run.stderr)
    assert "unexpected" not in line and "keyring ref is damaged" in line, line


def test_a_branch_git_made_under_main_is_named_not_a_raw_is_a_directory(tmp_path: Path, key: str) -> None:
    """A new vault has no main yet, so git lets an operator make
    ``refs/heads/main/backup``: reads, writes and verify then say what is in
    the way and how to move it, and after that the vault works."""
    vault_path = tmp_path / "fresh.vault"
    Vault.init(vault_path, key=key).close()
    git_out(vault_path, "update-ref", "refs/heads/main/backup", "refs/heads/vaultmem-keyring")
    opened = Vault.open(vault_path, key=key)
    from anthropic.lib.tools import ToolError

    with pytest.raises(ToolError) as refused:
        VaultMemoryTool(opened, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    assert "refs/heads/main is a folder" in str(refused.value.content), refused.value.content
    report = opened.verify()
    assert [f for f in report.findings if "refs/heads/main is a folder" in f.detail], report.findings
    opened.close()
    run = _cli(vault_path, key, "log")
    assert run.returncode != 0
    assert "refs/heads/main is a folder" in _one_line_error(run.stderr)

    git_out(vault_path, "branch", "-m", "main/backup", "backup")
    again = Vault.open(vault_path, key=key)
    VaultMemoryTool(again, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    assert again.read("/memories/a.txt") == "a\n"
    assert again.verify().ok
    fsck_strict(vault_path)


def test_a_vault_whose_git_config_does_not_parse_says_so_not_that_it_is_no_vault(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """A line of the vault's ``config`` garbled (by hand, or a failing disk):
    git names the file and line; so does vaultmem, instead of calling the
    vault "not a git repository".  Fixing the line opens it again."""
    _written(vault)
    config = vault_path / "config"
    good = config.read_text(encoding="utf-8")
    config.write_text(good + "[[[garbled\n", encoding="utf-8")
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(vault_path, key=key)
    message = str(refused.value)
    assert "not a git repository" not in message, message
    assert "config" in message and message.startswith("Error:") and "\n" not in message, message
    run = _cli(vault_path, key, "verify")
    assert run.returncode == 2 and "config" in _one_line_error(run.stderr)
    config.write_text(good, encoding="utf-8")
    assert Vault.open(vault_path, key=key).read("/memories/b0.txt") == FILES["/memories/b0.txt"]


# -- an erasure beside git's lock on the keyring ---------------------------------------------


def test_an_erasure_stopped_by_gits_keyring_lock_never_says_nothing_was_changed(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """The forget commit lands on main, then git holds
    ``refs/heads/vaultmem-keyring.lock``: the refusal says the erasure is
    recorded and its keys not destroyed yet (not "nothing was changed"),
    leaves git's lock alone, and the same erasure run again once git is
    done destroys the keys."""
    from stockgit_helpers import make_git_lock

    from vaultmem.errors import BusyError

    tool = VaultMemoryTool(vault, actor="support-bot")
    tool.call({"command": "create", "path": "/memories/secret.txt", "file_text": "card 4111\n"})
    lock = vault_path / "refs" / "heads" / "vaultmem-keyring.lock"
    make_git_lock(lock, b"")
    with pytest.raises(BusyError) as refused:
        vault.forget("/memories/secret.txt", reason="request 7", actor="ops")
    message = str(refused.value)
    assert "nothing was changed" not in message, message
    assert "erasure is recorded" in message and "vaultmem-keyring.lock" in message, message
    assert lock.exists()
    lock.unlink()  # git is done
    vault.forget("/memories/secret.txt", reason="request 7", actor="ops")
    vault.close()
    fsck_strict(vault_path)
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok, report.findings
