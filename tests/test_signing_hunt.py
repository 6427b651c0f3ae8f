"""Signed commits the way users meet them: hostile input to the signer
commands, keys revoked twice, signer changes from many threads or killed
half way, key files on a full disk, odd key file names and times, and
commits shaped so that stock git and vaultmem could read them differently.
Each test pins what a user of a security tool expects: a clear one-line
error that changes nothing, or a change that stock git's
``verify-commit`` judges exactly as ``vaultmem verify`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FakeClock
from signing_helpers import forge, git_ok, put, raw_commit, stock_git, tips, unsealed, verify_commit
from test_disk_full import fill
from test_signing_cli import Operator

from vaultmem import Signers, SigningKey, Vault, VaultError, VaultMemoryTool

OPS = ("--actor", "ops", "--signing-key", "ops.key")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs, to be filled up (as test_disk_full.py makes it; skipped where mounting is not permitted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here to make a small tmpfs disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("ops", "bot", "eve")}


@pytest.fixture
def team(vault: Vault, clock: FakeClock, keys: dict[str, SigningKey]) -> Vault:
    """A vault with the operator ops and the agent bot, set up for stock git."""
    vault.sign_as("ops", keys["ops"])
    vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
    clock.advance(10)
    vault.add_signer("bot", keys["bot"].public, actor="ops")
    vault.configure_signers()
    clock.advance(10)
    return vault


def write(vault: Vault, actor: str, key: SigningKey, name: str) -> None:
    VaultMemoryTool(vault, actor=actor, signing_key=key).call(
        {"command": "create", "path": f"/memories/{name}", "file_text": f"{name}\n"}
    )


def git_accepts(vault_path: Path, home: Path, commit: str) -> bool:
    return verify_commit(vault_path, home, commit).returncode == 0


# -- revoking -----------------------------------------------------------------------------


def test_a_key_revoked_before_can_still_be_revoked_as_compromised(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey]
) -> None:
    """A bot retired with a plain revocation whose key leaks later: the
    operator must be able to void everything it ever signed."""
    write(team, "bot", keys["bot"], "before.txt")
    signed_before = git_ok(vault_path, home, "rev-parse", "main").strip()
    clock.advance(30)
    team.revoke_signer("bot", actor="ops", reason="retired")
    clock.advance(30)
    assert team.verify().ok
    assert git_accepts(vault_path, home, signed_before)

    team.revoke_signer("bot", actor="ops", compromised=True, reason="the old laptop was stolen")
    entry = next(s for s in team.signers.entries if s.principal == "bot")
    assert entry.compromised and entry.reason == "the old laptop was stolen"
    report = team.verify()
    assert [(f.kind, f.version) for f in report.findings] == [("revoked", signed_before)], report.findings
    assert not git_accepts(vault_path, home, signed_before)  # the revocation file names the key now
    # once compromised, there is nothing left to revoke: refused, nothing changed
    before = tips(vault_path, home)
    with pytest.raises(VaultError, match="nothing was changed"):
        team.revoke_signer("bot", actor="ops", compromised=True)
    assert tips(vault_path, home) == before


@pytest.mark.parametrize(
    "reason",
    [
        "bye\rVaultmem-Actor: mallory",  # a carriage return: a terminal shows the second half over the first
        "bye\x1b[2KVaultmem-Actor: mallory",  # an escape sequence that erases the line on a terminal
        "bye\u2028Vaultmem-Actor: mallory",
        "bye\x00",
        "bye\u202eyllam",  # a bidi override
        "left \udcff",  # bytes that are not UTF-8, from a command line
    ],
)
def test_a_revocation_reason_that_is_not_plain_text_is_refused(
    team: Vault, vault_path: Path, home: Path, reason: str
) -> None:
    before = tips(vault_path, home)
    with pytest.raises(VaultError, match="reason") as info:
        team.revoke_signer("bot", actor="ops", reason=reason)
    assert str(info.value).startswith("Error: ") and "\n" not in str(info.value)
    assert tips(vault_path, home) == before
    assert all(s.revoked is None for s in team.signers.entries)


def test_a_reason_of_bytes_that_are_not_utf8_is_a_clear_cli_error(tmp_path: Path) -> None:
    op = Operator(tmp_path)
    for name in ("ops", "bot"):
        SigningKey.generate().save(op.home / f"{name}.key", comment=name)
    op.ok("init")
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    op.ok("signer", "add", "bot", "bot.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    signers = op.rev("vaultmem-signers")
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "signer", "revoke", "bot", "--reason", b"bye \xff\xfe", *OPS],
        capture_output=True,
        text=True,
        env=op.env(),
        cwd=op.home,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("vaultmem: ") and done.stderr.count("\n") == 1, done.stderr
    assert "reason" in done.stderr and "unexpected" not in done.stderr
    assert op.rev("vaultmem-signers") == signers


# -- git's allowed-signers file stays what the signers branch says ------------------------


def test_signer_changes_from_many_threads_all_succeed_and_leave_gits_file_current(
    vault_path: Path, key: str, keys: dict[str, SigningKey]
) -> None:
    """Four threads of one program, each with its vault, add signers at once:
    every change is committed, so none may report a failure, and git's
    allowed-signers file ends as the branch says."""
    vault = Vault.init(vault_path, key=key)
    vault.sign_as("ops", keys["ops"])
    vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
    vault.configure_signers()
    errors: list[BaseException] = []

    def add_many(tag: str) -> None:
        mine = Vault.open(vault_path, key=key)
        mine.sign_as("ops", keys["ops"])
        for n in range(40):
            try:
                mine.add_signer(f"{tag}{n}", SigningKey.generate().public, actor="ops")
            except BaseException as err:  # every failure is the finding
                errors.append(err)

    threads = [threading.Thread(target=add_many, args=(tag,)) for tag in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    reopened = Vault.open(vault_path, key=key)
    assert len(reopened.signers.entries) == 1 + 4 * 40
    allowed, revoked = reopened.allowed_signers_paths()
    assert allowed.read_bytes() == reopened.signers.allowed_signers()
    assert revoked.read_bytes() == reopened.signers.revoked_keys()
    assert sorted(p.name for p in allowed.parent.iterdir() if "signers" in p.name or "revoked" in p.name) == [
        "allowed_signers",
        "revoked_keys",
    ]


# A signer change that dies right after its commit is durable, before it
# rewrote git's files (as a SIGKILL would: nothing is cleaned up).
DIE_AFTER_COMMIT = r"""
import os, sys
from vaultmem import SigningKey, Vault
from vaultmem.git import commits
path, key = sys.argv[1], sys.argv[2]
vault = Vault.open(path, key=key)
vault.sign_as("ops", SigningKey.from_text(sys.stdin.read()))
def die(name):
    if name == "unkept":
        os._exit(9)
commits.on_step = die
vault.revoke_signer("bot", actor="ops", compromised=True, reason="the key leaked")
os._exit(0)
"""


@pytest.mark.parametrize("next_write", ["the operator retries", "an agent writes", "another signer change"])
def test_a_signer_change_killed_before_gits_files_were_rewritten_is_healed_by_the_next_write(
    team: Vault, vault_path: Path, key: str, home: Path, clock: FakeClock, keys: dict[str, SigningKey], next_write: str
) -> None:
    write(team, "bot", keys["bot"], "by-bot.txt")
    by_bot = git_ok(vault_path, home, "rev-parse", "main").strip()
    assert git_accepts(vault_path, home, by_bot)
    died = subprocess.run(
        [sys.executable, "-c", DIE_AFTER_COMMIT, str(vault_path), key],
        input=keys["ops"].to_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert died.returncode == 9, died.stderr
    reopened = Vault.open(vault_path, key=key, clock=clock)
    assert next(s for s in reopened.signers.entries if s.principal == "bot").compromised  # durable
    assert [f.kind for f in reopened.verify().findings] == ["revoked"]

    clock.advance(10)
    reopened.sign_as("ops", keys["ops"])
    if next_write == "the operator retries":
        with pytest.raises(VaultError, match="nothing was changed"):
            reopened.revoke_signer("bot", actor="ops", compromised=True, reason="the key leaked")
    elif next_write == "an agent writes":
        write(reopened, "ops", keys["ops"], "by-ops.txt")
    else:
        reopened.add_signer("eve", keys["eve"].public, actor="ops")
    allowed, revoked = reopened.allowed_signers_paths()
    assert allowed.read_bytes() == reopened.signers.allowed_signers()
    assert keys["bot"].public.line in revoked.read_text()
    # stock git now agrees with vaultmem: nothing the leaked key signed is good
    assert not git_accepts(vault_path, home, by_bot)


# -- key files ------------------------------------------------------------------------------


def test_signer_new_on_a_full_disk_leaves_nothing_behind_and_works_once_there_is_room(small_disk: Path) -> None:
    op = Operator(small_disk)
    fill(small_disk, leave=0)
    said = op.refused("signer", "new", "bot")
    assert "disk is full" in said and "Errno" not in said, said
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no empty bot.key to block a retry
    with pytest.raises(VaultError, match="disk is full"):
        SigningKey.generate().save(small_disk / "lib.key")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    (small_disk / "filler").unlink()
    op.ok("signer", "new", "bot")
    assert SigningKey.load(small_disk / "bot.key").public.line in (small_disk / "bot.key.pub").read_text()


def test_a_key_whose_public_file_cannot_be_written_leaves_no_private_key_behind(tmp_path: Path) -> None:
    (tmp_path / "bot.key.pub").mkdir()  # in the way of the public key, made after the check
    key = SigningKey.generate()
    with pytest.raises(VaultError, match=r"bot\.key\.pub"):
        key.save(tmp_path / "bot.key")
    assert not (tmp_path / "bot.key").exists()


def test_signer_add_reads_a_public_key_file_whose_name_starts_with_ssh(tmp_path: Path) -> None:
    """`vaultmem signer new ssh-bot` writes ssh-bot.key.pub and tells the
    operator to add that file: the add must read it."""
    op = Operator(tmp_path)
    SigningKey.generate().save(op.home / "ops.key", comment="ops")
    op.ok("init")
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    said = op.ok("signer", "new", "ssh-bot")
    hint = said.strip().splitlines()[-1].removeprefix("An operator adds it with: vaultmem ").split()
    assert hint == ["signer", "add", "ssh-bot", "ssh-bot.key.pub"]
    op.ok(*hint, "--actor", "ops", "--signing-key", "ops.key")
    assert op.json("signer", "list")["signers"][1]["principal"] == "ssh-bot"


def test_signer_add_of_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    op = Operator(tmp_path)
    SigningKey.generate().save(op.home / "ops.key", comment="ops")
    op.ok("init")
    os.mkfifo(op.home / "bot.pub")
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "signer", "add", "ops", "bot.pub", "--operator", *OPS],
        capture_output=True,
        text=True,
        env=op.env(),
        cwd=op.home,
        check=False,
        timeout=60,  # a FIFO nobody writes to must not hang the command
    )
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr
    assert op.rev("vaultmem-signers") == ""


def test_a_passphrase_of_bytes_that_are_not_utf8_protects_and_opens_a_key(tmp_path: Path) -> None:
    """A passphrase from the environment is bytes: the key opens with exactly
    those bytes, in vaultmem and in ssh-keygen."""
    op = Operator(tmp_path)
    raw = b"caf\xe9 au lait, with \xff"  # Latin-1, as an older system hands it over
    env = {**op.env(), "VAULTMEM_SIGNING_PASSPHRASE": os.fsdecode(raw)}
    made = subprocess.run(
        [sys.executable, "-m", "vaultmem", "signer", "new", "bot"],
        capture_output=True,
        text=True,
        env=env,
        cwd=op.home,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    opened = subprocess.run([b"ssh-keygen", b"-y", b"-P", raw, b"-f", b"bot.key"], capture_output=True, cwd=op.home)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.split()[:2] == (op.home / "bot.key.pub").read_bytes().split()[:2]
    assert SigningKey.load(op.home / "bot.key", passphrase=os.fsdecode(raw)).public.line.encode() in opened.stdout


# -- checkpoints --------------------------------------------------------------------------


@pytest.mark.parametrize("out", ["missing/folder/cp", "a-folder", "ops.key/cp"])
def test_a_checkpoint_whose_out_file_cannot_be_written_makes_no_checkpoint(tmp_path: Path, out: str) -> None:
    op = Operator(tmp_path)
    SigningKey.generate().save(op.home / "ops.key", comment="ops")
    op.ok("init")
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    op.write("a.txt", "--actor", "ops", "--signing-key", "ops.key")
    (op.home / "a-folder").mkdir()
    for _ in range(2):  # a retry does not pile up checkpoints either
        said = op.refused("checkpoint", "--actor", "ops", "--signing-key", "ops.key", "--out", out)
        assert "no checkpoint was made" in said, said
    assert op.rev("vaultmem-checkpoints") == ""
    op.ok("checkpoint", "--actor", "ops", "--signing-key", "ops.key", "--out", "kept")
    assert op.git("rev-list", "--count", "vaultmem-checkpoints").stdout.strip() == "1"
    assert (op.home / "kept").read_text().startswith("vaultmem checkpoint 1\n")


# -- validity windows that stock git must read as vaultmem does ---------------------------


@pytest.mark.parametrize("valid_after", ["1970-01-01", "1969-12-31", "1900-01-01", "0999-06-01"])
def test_a_key_valid_from_before_1970_signs_commits_stock_git_accepts(tmp_path: Path, valid_after: str) -> None:
    op = Operator(tmp_path)
    for name in ("ops", "bot", "late"):
        SigningKey.generate().save(op.home / f"{name}.key", comment=name)
    op.ok("init")
    op.ok("git-setup")
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    add = ("--actor", "ops", "--signing-key", "ops.key")
    op.ok("signer", "add", "bot", "bot.key.pub", "--valid-after", valid_after, *add)
    op.ok("signer", "add", "late", "late.key.pub", *add)
    for name in ("bot", "late"):
        assert op.write(f"{name}.txt", "--actor", name, "--signing-key", f"{name}.key").returncode == 0
        checked = op.verify_commit("main")
        assert checked.returncode == 0, checked.stderr
        assert f'Good "git" signature for {name}' in checked.stderr and "bad options" not in checked.stderr
    assert op.run("verify").returncode == 0


@pytest.mark.parametrize("window", [{"valid_before": 10**12}, {"valid_after": 10**12}])
def test_a_window_beyond_what_an_allowed_signers_file_can_hold_is_refused(
    team: Vault, vault_path: Path, home: Path, keys: dict[str, SigningKey], window: dict[str, int]
) -> None:
    before = tips(vault_path, home)
    with pytest.raises(VaultError, match="valid") as info:
        team.add_signer("eve", keys["eve"].public, actor="ops", **window)
    assert str(info.value).startswith("Error: ")
    assert tips(vault_path, home) == before
    assert [s.principal for s in team.signers.entries] == ["ops", "bot"]


# -- commits stock git and vaultmem could read two ways -------------------------------------


@pytest.mark.parametrize("doubled", ["author", "committer"])
def test_a_signed_commit_with_two_author_or_committer_lines_is_a_finding(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], doubled: str
) -> None:
    """bot signs (with its own key and the vault key) a commit that names
    ops as well as bot for its author, or has two times: stock git lists it
    under ``git log --author=ops`` and ``git fsck`` refuses it; verify must
    not call it a good signature by bot."""
    write(team, "bot", keys["bot"], "one.txt")
    clock.advance(30)
    write(team, "bot", keys["bot"], "two.txt")
    body = unsealed(raw_commit(vault_path, home, "main"))
    head, _, message = body.partition(b"\n\n")
    lines = head.split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(doubled.encode() + b" "))
    if doubled == "author":
        lines.insert(at, lines[at].replace(b"bot <bot>", b"ops <ops>"))
    else:  # a second time, years before: the first is the one git gives ssh-keygen
        name, _, zone = lines[at].rsplit(b" ", 2)
        lines.insert(at, b" ".join((name, b"1000000000", zone)))
    forged = put(vault_path, home, forge(team, b"\n".join(lines) + b"\n\n" + message, keys["bot"]))
    if doubled == "author":
        assert stock_git(vault_path, home, "fsck").returncode != 0  # git itself calls the commit malformed
        assert git_ok(vault_path, home, "log", "--author=ops", "--format=%H", "main").split() == [forged]
    else:
        assert not git_accepts(vault_path, home, forged)  # git judged it at the first time: before bot's key

    report = team.verify()
    kinds = {(f.kind, f.version) for f in report.findings if f.kind != "message"}
    expected = "wrong actor" if doubled == "author" else "bad signature"
    assert kinds == {(expected, forged)}, report.findings
    assert (report.commits, report.signed) == (2, 1)  # the forged commit replaced bot's second


def test_a_forged_checkpoint_on_the_branch_does_not_stop_automatic_checkpoints(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey]
) -> None:
    """Whoever can write the vault appends a checkpoint claiming a billion
    commits, signed by a key of their own: vaultmem must go on signing a
    checkpoint every N commits of main, as the policy asks."""
    team.set_policy(actor="ops", checkpoint_every=2)
    for n in range(2):
        clock.advance(10)
        write(team, "bot", keys["bot"], f"a{n}.txt")
    assert len(git_ok(vault_path, home, "rev-list", "refs/heads/vaultmem-checkpoints").split()) == 1
    kept = git_ok(vault_path, home, "show", "vaultmem-checkpoints:checkpoints").encode()
    mallory = SigningKey.generate()
    body = f"vaultmem checkpoint 1\nhead {'0' * 40}\ncommits 1000000000\ntime {int(clock.now)}\nsigner bot\n"
    forged = kept + body.encode() + mallory.sign(body.encode(), "vaultmem-checkpoint")
    blob = git_ok(vault_path, home, "hash-object", "-w", "--stdin", stdin=forged).strip()
    tree = git_ok(vault_path, home, "mktree", stdin=f"100644 blob {blob}\tcheckpoints\n".encode()).strip()
    tip = git_ok(vault_path, home, "rev-parse", "refs/heads/vaultmem-checkpoints").strip()
    who = ("-c", "user.name=mallory", "-c", "user.email=mallory@example.com")
    commit = git_ok(vault_path, home, *who, "commit-tree", tree, "-p", tip, "-m", "checkpoint").strip()
    git_ok(vault_path, home, "update-ref", "refs/heads/vaultmem-checkpoints", commit, tip)

    for n in range(4):
        clock.advance(10)
        write(team, "bot", keys["bot"], f"b{n}.txt")
    text = git_ok(vault_path, home, "show", "vaultmem-checkpoints:checkpoints")
    # the first (at 1 commit), the forged one, and one each 2 commits on: at 3 and at 5
    assert text.count("vaultmem checkpoint 1\n") == 4, text
    assert "commits 3\n" in text and "commits 5\n" in text


# -- verify's view when the signers are gone ------------------------------------------------


def test_verify_does_not_pass_a_signed_history_whose_signers_branch_was_deleted(
    team: Vault, vault_path: Path, key: str, home: Path, clock: FakeClock, keys: dict[str, SigningKey]
) -> None:
    """Whoever can write the vault deletes vaultmem-signers with stock git
    (the first step to making themself its first operator): verify must not
    go on saying "no problems found" while no signature can be checked."""
    for n in range(2):
        clock.advance(10)
        write(team, "bot", keys["bot"], f"n{n}.txt")
    signed_commits = git_ok(vault_path, home, "rev-list", "main").split()
    report = team.verify()
    assert report.ok and report.signed == 2
    git_ok(vault_path, home, "update-ref", "-d", "refs/heads/vaultmem-signers")

    report = Vault.open(vault_path, key=key, clock=clock).verify()
    assert not report.ok
    assert sorted((f.kind, f.version) for f in report.findings) == sorted(
        ("unknown signer", c) for c in signed_commits
    ), report.findings
    assert report.signed == 0


def test_verify_of_a_vault_that_never_had_signers_is_unchanged(vault: Vault, clock: FakeClock) -> None:
    tool = VaultMemoryTool(vault, actor="bot")
    for n in range(3):
        clock.advance(10)
        tool.call({"command": "create", "path": f"/memories/n{n}.txt", "file_text": "x\n"})
    report = vault.verify()
    assert report.ok and (report.commits, report.signed, report.unsigned) == (3, 0, 0)  # as docs/audit.md shows
    assert not vault.verify(checkpoints=["vaultmem checkpoint 1\nhead x\n"]).ok  # given, with nothing to check them


def test_a_very_long_signer_name_is_refused_in_one_short_line(tmp_path: Path) -> None:
    op = Operator(tmp_path)
    said = op.refused("signer", "new", "a" * 100_000)
    assert len(said) < 400 and "100000" not in said and "99960 more characters" in said, said[:300]
    assert list(tmp_path.glob("*.key*")) == []


def test_a_checkpoint_refused_for_want_of_a_key_leaves_no_empty_out_file(tmp_path: Path) -> None:
    op = Operator(tmp_path)
    SigningKey.generate().save(op.home / "ops.key", comment="ops")
    op.ok("init")
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", *OPS)
    op.write("a.txt", *OPS)
    assert "no signing key" in op.refused("checkpoint", "--actor", "ops", "--out", "cp")
    assert not (op.home / "cp").exists()
    (op.home / "kept").write_text("")  # a file that was there stays, as it was
    op.refused("checkpoint", "--actor", "ops", "--out", "kept")
    assert (op.home / "kept").exists()


# -- a long signers history --------------------------------------------------------------------


def test_a_signer_change_reads_the_new_part_of_the_signers_history_not_all_of_it(
    team: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every signer change, and every program's first signed write, checked
    the whole signers branch from its first commit: with n changes behind
    it, each read n lists of up to n signers (400 changes: 75 s to add them,
    half a second per program start).  The history checked once is not read
    again; verify still reads all of it."""
    for n in range(30):
        team.add_signer(f"agent{n}", SigningKey.generate().public, actor="ops")
    read: list[int] = []
    original = Signers.from_bytes.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Signers], data: bytes) -> Signers:
        read.append(1)
        return original(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(Signers, "from_bytes", classmethod(counting))
    team.add_signer("late", SigningKey.generate().public, actor="ops")
    assert len(read) <= 4, len(read)
    read.clear()
    report = team.verify()
    assert report.ok and len(read) >= 33  # every commit of the signers branch, checked again
