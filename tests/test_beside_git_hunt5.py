"""Writes other than the memory tool's, beside stock git and beside other
openers of the same vault: a vault open in one place keeps working after
another opener (a second ``Vault`` in the same process, or another process)
changed its keys, erased versions or moved its branches.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeClock
from stockgit_helpers import (
    STEPS,
    GitRun,
    commit_count,
    commits_module,
    fsck_strict,
    git_out,
    leftovers,
    listing,
    listing_diff,
    rev,
    run_git,
    stock_git_round,
)
from test_key_admin import key_ids

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.errors import ConflictError, ErasedError
from vaultmem.repo.verify import VerifyReport

# -- key changes from a vault opened before another opener changed the keyring ----------


def _two_openers(vault_path: Path, key: str, clock: FakeClock) -> tuple[Vault, Vault, str]:
    """One vault with a file and a secret, opened twice in this process; the
    secret's first version id."""
    first = Vault.init(vault_path, key=key, clock=clock)
    tool = VaultMemoryTool(first, actor="support-bot")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    tool.call({"command": "create", "path": "/memories/secret.txt", "file_text": "card 4111\n"})
    secret = first.history()[0].id
    clock.advance(10)
    return first, Vault.open(vault_path, key=key, clock=clock), secret


@pytest.mark.parametrize("meanwhile", ["rotate_key", "forget"])
@pytest.mark.parametrize("then", ["rotate_key", "rotate_key_reencrypt", "change_key"])
def test_a_key_change_from_a_vault_opened_before_another_openers_key_change_builds_on_it(
    vault_path: Path, key: str, clock: FakeClock, meanwhile: str, then: str
) -> None:
    """docs/format.md: an open vault reads the keyring again when another
    process changed it (an erasure, a rotation).  Its own key changes did
    not: they failed with "the keyring changed since this vault was opened"
    until the application opened the vault again."""
    early, other, secret = _two_openers(vault_path, key, clock)
    if meanwhile == "rotate_key":
        other.rotate_key(actor="ops")
    else:
        other.forget("/memories/secret.txt", reason="customer asked", actor="ops")
    keys_then = key_ids(other)
    other.close()
    clock.advance(10)

    new_key = key
    if then == "change_key":
        new_key = generate_key()
        early.change_key(key=new_key)
        assert key_ids(early) == keys_then
    else:
        made = early.rotate_key(actor="ops", reencrypt=then == "rotate_key_reencrypt")
        assert key_ids(early) == [*keys_then, made.id]
    early.close()

    reopened = Vault.open(vault_path, key=new_key)
    assert reopened.read("/memories/a.txt") == "a\n"
    if meanwhile == "forget":  # the erased version stays erased: no key of it came back
        with pytest.raises(ErasedError):
            reopened.read("/memories/secret.txt", at=secret)
    else:
        assert reopened.read("/memories/secret.txt") == "card 4111\n"
    assert key_ids(reopened)[: len(keys_then)] == keys_then
    assert reopened.verify().ok, reopened.verify().findings
    assert leftovers(vault_path) == []
    fsck_strict(vault_path)
    keyring = rev(vault_path, "refs/heads/vaultmem-keyring")
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert rev(vault_path, "refs/heads/vaultmem-keyring") == keyring
    reopened.close()


@pytest.mark.parametrize("then", ["rotate_key", "change_key"])
def test_a_key_change_after_another_opener_changed_the_user_key_is_still_refused_changing_nothing(
    vault_path: Path, key: str, clock: FakeClock, then: str
) -> None:
    """A keyring this vault's key no longer opens is never built on."""
    early, other, _ = _two_openers(vault_path, key, clock)
    newer = generate_key()
    other.change_key(key=newer)
    other.close()
    keyring = rev(vault_path, "refs/heads/vaultmem-keyring")
    with pytest.raises(ConflictError, match="open the vault again"):
        if then == "rotate_key":
            early.rotate_key(actor="ops")
        else:
            early.change_key(key=generate_key())
    early.close()
    assert rev(vault_path, "refs/heads/vaultmem-keyring") == keyring
    assert leftovers(vault_path) == []
    with Vault.open(vault_path, key=newer) as reopened:
        assert reopened.read("/memories/secret.txt") == "card 4111\n"
        assert reopened.verify().ok


# -- verify while another opener's erasure is under way ---------------------------------


@pytest.mark.parametrize("step", ["erase-keys", "erase-prune"])
def test_verify_while_another_openers_erasure_is_under_way_reports_no_cut_short_erasure(
    vault_path: Path, key: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """An auditor's verify that runs while an erasure (a forget, or the
    retention a tool runs by itself) is between its steps said the erasure
    was cut short and failed; it now waits for the erasure and checks what
    it left."""
    eraser, auditor, _ = _two_openers(vault_path, key, clock)
    reports: list[object] = []
    started: list[threading.Thread] = []

    def at_step(name: str) -> None:
        if name == step and not started:
            thread = threading.Thread(target=lambda: reports.append(auditor.verify()))
            started.append(thread)
            thread.start()
            thread.join(1.0)  # the check runs while the erasure holds the vault

    monkeypatch.setattr(commits_module(), "on_step", at_step)
    eraser.forget("/memories/secret.txt", reason="customer asked", actor="ops")
    monkeypatch.setattr(commits_module(), "on_step", None)
    assert started, f"the erasure never reported the step {step!r}"
    started[0].join(60)
    [report] = reports
    assert isinstance(report, VerifyReport)
    assert report.ok, report.findings
    eraser.close()
    auditor.close()


def test_verify_still_reports_an_erasure_that_was_cut_short(vault_path: Path, key: str, clock: FakeClock) -> None:
    eraser, auditor, _ = _two_openers(vault_path, key, clock)
    script = (
        "import os, sys\n"
        "import vaultmem.git.commits as c\n"
        "from vaultmem import Vault\n"
        "def die(name):\n"
        "    if name == 'erase-keys':\n"
        "        os._exit(9)\n"
        "c.on_step = die\n"
        "Vault.open(sys.argv[1]).forget('/memories/secret.txt', reason='r', actor='ops')\n"
    )
    eraser.close()
    killed = subprocess.run(
        [sys.executable, "-c", script, str(vault_path)],
        env={**os.environ, "VAULTMEM_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == 9, killed.stderr
    report = auditor.verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.findings
    assert "cut short" in report.findings[0].detail
    auditor.close()


# -- writes other than the memory tool's, with stock git at every step ------------------

GIT_AT_EACH_STEP = ("repack", "pack-refs", "fetch", "push", "update-ref")
REFS = ("refs/heads/main", "refs/heads/vaultmem-policy", "refs/heads/vaultmem-signers")
ALICE = SigningKey.generate()


def _import_folder(root: Path) -> Path:
    (root / "memories" / "notes").mkdir(parents=True, exist_ok=True)
    (root / "memories" / "notes" / "imported.md").write_text("imported\n", encoding="utf-8")
    return root


WRITES: dict[str, Callable[[Vault, Path], object]] = {
    "restore": lambda v, _: v.restore(v.history()[-1].id, actor="ops"),
    "import_folder": lambda v, tmp: v.import_folder(_import_folder(tmp / "sdk"), actor="ops"),
    "set_policy": lambda v, _: v.set_policy(actor="ops", max_files=77),
    "rotate_key": lambda v, _: v.rotate_key(actor="ops", reencrypt=True),
    "add_signer": lambda v, _: (
        v.sign_as("ops-alice", ALICE),
        v.add_signer("ops-alice", ALICE.public, actor="ops-alice", operator=True),
    ),
    "forget": lambda v, _: v.forget("/memories/secret.txt", reason="customer asked", actor="ops"),
    "expire": lambda v, _: v.expire("1d", actor="ops", now=2_000_000_000),
}


def _written(name: str, vault: Vault, secret: str) -> None:
    """What the write ``name`` made, as a fresh opener reads it."""
    files = {e.path for e in vault.listing("/memories", depth=5) if e.kind == "file"}
    if name == "restore":
        assert files == {"/memories/a.txt"}
    elif name == "import_folder":
        assert vault.read("/memories/notes/imported.md") == "imported\n"
    elif name == "set_policy":
        assert vault.policy.max_files == 77
    elif name == "rotate_key":
        assert len(vault.keys()) == 2
        assert vault.read("/memories/secret.txt") == "card 4111\n"
    elif name == "add_signer":
        assert [e.principal for e in vault.signers.entries] == ["ops-alice"]
    elif name == "forget":
        assert "/memories/secret.txt" not in files
        with pytest.raises(ErasedError):
            vault.read("/memories/secret.txt", at=secret)
    elif name == "expire":
        assert files == set()


def _commits_on(vault_path: Path, ref: str) -> int:
    return commit_count(vault_path, ref) if run_git(vault_path, "rev-parse", "--verify", ref).returncode == 0 else 0


@pytest.mark.parametrize("name", list(WRITES))
def test_stock_git_at_every_step_of_a_write_through_the_api_loses_nothing(
    name: str, vault_path: Path, key: str, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore, an import, a policy change, a key rotation with its
    re-encryption, a new signer, an erasure and an expiry, each with
    `git repack -ad`, `git pack-refs --all`, a fetch into the vault, a push
    from it or an operator's update-ref (in turn) run at every step of every
    ref it moves: the write is whole once, and git's commands ran cleanly."""
    vault, other, secret = _two_openers(vault_path, key, clock)
    other.close()
    for bare in ("other.git", "mirror.git"):
        git_out(tmp_path, "init", "--quiet", "--bare", str(tmp_path / bare))
    counts = {ref: _commits_on(vault_path, ref) for ref in REFS}
    runs: list[GitRun] = []
    seen: list[str] = []

    def at_step(step: str) -> None:
        seen.append(step)  # each step its own command, in turn
        kind = GIT_AT_EACH_STEP[len(seen) % len(GIT_AT_EACH_STEP)]
        runs.extend(stock_git_round(kind, str(vault_path), str(tmp_path), len(runs)))

    monkeypatch.setattr(commits_module(), "on_step", at_step)
    WRITES[name](vault, tmp_path)
    monkeypatch.setattr(commits_module(), "on_step", None)
    vault.close()

    assert set(STEPS) <= set(seen), seen
    assert [run.describe() for run in runs if not run.clean] == []
    assert leftovers(vault_path) == []
    fsck_strict(vault_path)
    grown = {ref: _commits_on(vault_path, ref) - n for ref, n in counts.items()}
    assert all(n in (0, 1) for n in grown.values()) and any(grown.values()), grown  # one commit a ref at most
    with Vault.open(vault_path, key=key) as reopened:
        _written(name, reopened, secret)
        assert reopened.verify().ok, reopened.verify().findings
        VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    fsck_strict(vault_path)


# -- readers beside a writer killed mid-write --------------------------------------------


def test_git_log_p_and_vaultmem_log_beside_an_erasure_killed_mid_way_write_nothing(
    vault_path: Path, key: str, clock: FakeClock
) -> None:
    """The forget commit is on main, its keys not destroyed yet: neither the
    textconv driver under `git log -p` nor `vaultmem log` finishes the
    erasure, or writes or moves anything."""
    vault, other, _ = _two_openers(vault_path, key, clock)
    driver = [sys.executable, "-P", "-m", "vaultmem", "--vault", str(vault_path), "textconv"]
    vault.configure_textconv(shlex.join(driver))
    vault.close()
    other.close()
    env = {**os.environ, "VAULTMEM_KEY": key}
    script = (
        "import os, sys\n"
        "import vaultmem.git.commits as c\n"
        "from vaultmem import Vault\n"
        "c.on_step = lambda name: os._exit(9) if name == 'erase-keys' else None\n"
        "Vault.open(sys.argv[1]).forget('/memories/secret.txt', reason='r', actor='ops')\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(vault_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == 9, killed.stderr
    tips = git_out(vault_path, "for-each-ref")
    seen = listing(vault_path)
    out = {}
    for command in (
        ["git", "-C", str(vault_path), "log", "-p", "-1", "refs/heads/main"],  # the driver decrypts its blob
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "log"],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        assert done.returncode == 0, done.stderr
        out[command[0]] = done.stdout
        assert listing_diff(seen, listing(vault_path)) == [], command
        assert git_out(vault_path, "for-each-ref") == tips, command
    assert "[vaultmem: not decrypted" in out["git"]  # the driver ran: the version reads as erased already
