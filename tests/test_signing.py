"""Signed commits, the library side: every commit a signer makes verifies with
stock ``git verify-commit`` and nothing but the allowed-signers file the vault
wrote; every way an attacker who holds the vault key (but not a signer's key)
can forge, copy, misattribute or replay a signature is named by ``verify()``
(and refused by stock git where git can tell); refused writes change nothing;
signing keys are real OpenSSH files that ``ssh-keygen`` reads and checks.

Attacks are made as an attacker would make them: raw commit bytes from
``git cat-file``, re-sealed with the vault key, signed with whatever key the
attacker has, stored with ``git hash-object`` and put on main with
``git update-ref`` (tests/signing_helpers.py), never through the vault.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from signing_helpers import (
    BRANCHES,
    add_signature,
    author_of,
    corrupt,
    counts,
    edit,
    forge,
    git_ok,
    put,
    raw_commit,
    rev_list,
    seal,
    signature_of,
    stock_git,
    store_tree,
    tips,
    unsealed,
    verify_commit,
)

from vaultmem import BadKeyError, IntegrityError, Signers, SigningError, SigningKey, Vault, VaultError, VaultMemoryTool
from vaultmem.core.signing import CHECKPOINT_NAMESPACE, SignatureError, parse_signature, split_signature

GOOD = re.compile(r'Good "git" signature for (\S+) with ED25519 key (SHA256:\S+)')


# -- a vault with an operator and two agents ----------------------------------------------


@dataclass
class Team:
    """``ops`` (an operator) and two agents, ``alice`` and ``bob``, each with
    its own key and its own memory tool on one vault."""

    vault: Vault
    path: Path
    home: Path  # HOME for stock git: empty, so no user config
    clock: FakeClock
    keys: dict[str, SigningKey]
    tools: dict[str, VaultMemoryTool]
    written: int = 0

    def write(self, actor: str, text: str = "") -> str:
        """One memory commit by ``actor``'s tool; main's new tip."""
        self.clock.advance(30)
        self.written += 1
        name = f"/memories/{actor}-{self.written}.txt"
        self.tools[actor].call({"command": "create", "path": name, "file_text": text or f"note {self.written}\n"})
        return self.tip()

    def tip(self, branch: str = "main") -> str:
        return git_ok(self.path, self.home, "rev-parse", f"refs/heads/{branch}").strip()

    def state(self) -> tuple[dict[str, str], dict[str, int]]:
        """Every ref's tip and every branch's commit count: what "nothing changed" compares."""
        return tips(self.path, self.home), counts(self.path, self.home)

    def raw(self, rev: str = "main") -> bytes:
        return raw_commit(self.path, self.home, rev)

    def put(self, raw: bytes) -> str:
        return put(self.path, self.home, raw)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def team(vault: Vault, vault_path: Path, clock: FakeClock, home: Path, tmp_path: Path) -> Team:
    keys = {name: SigningKey.generate() for name in ("ops", "alice", "bob")}
    vault.sign_as("ops", keys["ops"])
    vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
    clock.advance(10)
    vault.add_signer("alice", keys["alice"].public, actor="ops")
    vault.add_signer("bob", keys["bob"].public.line, actor="ops")  # a .pub line works as well as a key
    # alice's tool takes a key file, bob's a SigningKey: both are how a program passes signing_key=
    alice_file = tmp_path / "alice.key"
    keys["alice"].save(alice_file, comment="alice@agents")
    tools = {
        "alice": VaultMemoryTool(vault, actor="alice", session="sess-a", signing_key=str(alice_file)),
        "bob": VaultMemoryTool(vault, actor="bob", session="sess-b", signing_key=keys["bob"]),
    }
    return Team(vault, vault_path, home, clock, keys, tools)


def findings(report: Any) -> list[tuple[str, str | None]]:
    """(kind, commit) of each finding: the attack's, and nothing else."""
    return [(f.kind, f.version) for f in report.findings]


def assert_git_refuses(team: Team, commit: str) -> str:
    result = verify_commit(team.path, team.home, commit)
    assert result.returncode != 0, f"git verify-commit accepted {commit}: {result.stderr}"
    assert not GOOD.search(result.stderr), result.stderr  # no principal it is good for
    return result.stderr


def assert_git_accepts(team: Team, commit: str) -> str:
    """git's verdict on a commit: good, for a principal; returns the principal."""
    result = verify_commit(team.path, team.home, commit)
    assert result.returncode == 0, f"git verify-commit refused {commit}: {result.stderr}"
    found = GOOD.search(result.stderr)
    assert found, result.stderr
    return found.group(1)


# -- 1. stock git verifies every commit, with the vault's allowed-signers file only ---------


def test_stock_git_verifies_every_commit_of_every_branch(team: Team) -> None:
    vault, clock = team.vault, team.clock
    team.write("alice")
    team.write("bob")
    team.write("alice")
    # the operator: a signer change, a policy change, a checkpoint
    clock.advance(30)
    carol = SigningKey.generate()
    vault.add_signer("carol", carol.public, actor="ops")
    clock.advance(30)
    vault.set_policy(actor="ops", max_files=500)
    clock.advance(30)
    checkpoint = vault.checkpoint(actor="ops")
    assert checkpoint.signer == "ops" and checkpoint.commits == 3 and checkpoint.head == team.tip()
    team.write("bob")
    team.write("alice")

    allowed, revoked = vault.configure_signers()
    assert allowed.read_bytes() == vault.signers.allowed_signers()
    assert revoked.read_bytes() == b""
    assert git_ok(team.path, team.home, "config", "gpg.format").strip() == "ssh"
    assert git_ok(team.path, team.home, "config", "gpg.ssh.allowedSignersFile").strip() == str(allowed)
    assert git_ok(team.path, team.home, "config", "gpg.ssh.revocationFile").strip() == str(revoked)
    # nothing of the user's config or home takes part
    assert not any(team.home.iterdir())

    fingerprints = {name: key.public.fingerprint for name, key in team.keys.items()}
    expected = {"main": 5, "vaultmem-signers": 4, "vaultmem-policy": 1, "vaultmem-checkpoints": 1}
    for branch in BRANCHES:
        commits = rev_list(team.path, team.home, branch)
        assert len(commits) == expected[branch], branch
        for commit in commits:
            result = verify_commit(team.path, team.home, commit)
            assert result.returncode == 0, f"{branch} {commit}: {result.stderr}"
            found = GOOD.search(result.stderr)
            assert found, result.stderr
            author = author_of(team.path, team.home, commit)
            assert found.group(1) == author, (branch, commit, result.stderr)
            assert found.group(2) == fingerprints[author]
        # %G? is G (good, and a known principal) for each, and %GS names the author
        log = git_ok(team.path, team.home, "log", "--format=%H %G? %GS %an", f"refs/heads/{branch}")
        rows = [line.split() for line in log.splitlines()]
        assert [row[0] for row in rows] == commits
        assert all(row[1] == "G" and row[2] == row[3] for row in rows), log
        shown = git_ok(team.path, team.home, "log", "--show-signature", f"refs/heads/{branch}")
        assert len(GOOD.findall(shown)) == len(commits), shown
    # main's authors are the agents, the other branches' the operator
    assert {author_of(team.path, team.home, c) for c in rev_list(team.path, team.home, "main")} == {"alice", "bob"}

    report = vault.verify()
    assert report.ok, report.problems
    assert report.signed == expected["main"] == report.commits
    assert report.unsigned == 0


def test_git_without_the_allowed_signers_file_does_not_call_them_good(team: Team) -> None:
    """The control: the verdict comes from the vault's allowed-signers file (no
    file configured, git cannot name a principal and refuses)."""
    commit = team.write("alice")
    result = verify_commit(team.path, team.home, commit)
    assert result.returncode != 0
    assert not GOOD.search(result.stderr), result.stderr
    team.vault.configure_signers()
    assert assert_git_accepts(team, commit) == "alice"


# -- 2. attacks: verify names each one, stock git refuses those it can see ---------------


def test_forged_signature_by_a_key_that_is_no_signer(team: Team) -> None:
    team.write("alice")
    honest = team.write("bob")
    mallory = SigningKey.generate()
    # the attacker holds the vault key: a new commit on main, sealed, signed with their own key
    body = edit(unsealed(team.raw()), parent=honest, when=int(team.clock.now) + 5)
    body = body.replace(b"Vaultmem-Session: sess-b", b"Vaultmem-Session: mallory")
    forged = team.put(forge(team.vault, body, mallory))
    assert git_ok(team.path, team.home, "rev-parse", "main~1").strip() == honest

    report = team.vault.verify()
    assert findings(report) == [("unknown signer", forged)], report.problems
    assert report.commits == 3
    assert report.signed == 2
    assert mallory.public.fingerprint in str(report.findings[0])
    team.vault.configure_signers()
    assert_git_refuses(team, forged)
    assert assert_git_accepts(team, honest) == "bob"


def test_corrupted_signature_is_a_bad_signature(team: Team) -> None:
    team.write("alice")
    team.write("bob")
    raw = team.raw()
    payload, armored = split_signature(raw)
    assert armored is not None
    parse_signature(corrupt(armored))  # still a well-formed signature
    tampered = team.put(add_signature(payload, corrupt(armored)))

    report = team.vault.verify()
    assert findings(report) == [("bad signature", tampered)], report.problems
    assert report.commits == 2
    assert not any(f.kind == "seal" for f in report.findings)  # the seal is intact: only the signature is bad
    team.vault.configure_signers()
    assert_git_refuses(team, tampered)


def test_signature_copied_onto_another_commit(team: Team) -> None:
    first = team.write("alice")
    team.write("alice")
    copied = signature_of(team.raw(first))
    # the tip, re-sealed, wearing the first commit's (valid, alice's) signature
    moved = team.put(add_signature(seal(team.vault, unsealed(team.raw())), copied))

    report = team.vault.verify()
    assert findings(report) == [("bad signature", moved)], report.problems
    assert report.commits == 2
    team.vault.configure_signers()
    assert_git_refuses(team, moved)
    assert assert_git_accepts(team, first) == "alice"


def test_signer_key_on_a_commit_recorded_as_another_actor(team: Team) -> None:
    team.write("alice")
    bobs = team.write("bob")
    # alice's real key signs a commit recorded as bob's: the attacker holds the vault key and alice's key
    misattributed = team.put(forge(team.vault, unsealed(team.raw(bobs)), team.keys["alice"]))
    assert author_of(team.path, team.home, misattributed) == "bob"

    report = team.vault.verify()
    assert findings(report) == [("wrong actor", misattributed)], report.problems
    assert report.commits == 2
    team.vault.configure_signers()
    # Stock git only asks whether the key is allowed for *some* principal: it
    # says "Good" for alice on a commit whose author is bob.  vaultmem also
    # checks that the signer is the commit's author, and catches it.
    principal = assert_git_accepts(team, misattributed)
    assert principal == "alice" != author_of(team.path, team.home, misattributed)


def test_author_that_is_not_the_actor_trailer(team: Team) -> None:
    team.write("bob")
    alices = team.write("alice")
    # author alice (so git and the key agree), but the trailer says bob wrote it
    body = unsealed(team.raw(alices)).replace(b"Vaultmem-Actor: alice", b"Vaultmem-Actor: bob")
    forged = team.put(forge(team.vault, body, team.keys["alice"]))

    report = team.vault.verify()
    # the message check also sees the author is not the trailer's actor
    assert sorted(findings(report)) == [("message", forged), ("wrong actor", forged)], report.problems


def test_revoked_key_used_after_its_revocation(team: Team) -> None:
    before = team.write("alice")
    team.clock.advance(30)
    team.vault.revoke_signer("alice", actor="ops", reason="left the project")
    team.clock.advance(60)
    state = team.state()
    # vaultmem refuses to write with the revoked key, through the tool and the library
    with pytest.raises(ToolError) as info:
        team.tools["alice"].call({"command": "create", "path": "/memories/late.txt", "file_text": "late\n"})
    assert isinstance(info.value.__cause__, SigningError)
    assert "was revoked" in str(info.value.content) and "Nothing was changed" in str(info.value.content)
    with pytest.raises(SigningError, match="was revoked"):
        team.vault.undo(actor="alice")
    assert team.state() == state

    # the attacker signs with it anyway, after the revocation
    body = edit(unsealed(team.raw()), parent=before, when=int(team.clock.now))
    late = team.put(forge(team.vault, body, team.keys["alice"]))
    report = team.vault.verify()
    assert findings(report) == [("revoked", late)], report.problems
    assert report.commits == 2
    team.vault.configure_signers()
    assert_git_refuses(team, late)  # dated after the key's valid-before
    assert assert_git_accepts(team, before) == "alice"  # what alice signed before stays good


@pytest.mark.parametrize("window", ["ended", "not yet"])
def test_key_used_outside_its_validity(team: Team, window: str) -> None:
    anchor = team.write("alice")
    now = int(team.clock.now)
    carol = SigningKey.generate()
    if window == "ended":
        team.vault.add_signer("carol", carol.public, actor="ops", valid_before=now + 100)
        team.clock.advance(500)
    else:
        team.vault.add_signer("carol", carol.public, actor="ops", valid_after=now + 10_000)
        team.clock.advance(30)
    tool = VaultMemoryTool(team.vault, actor="carol", signing_key=carol)
    state = team.state()
    with pytest.raises(ToolError, match="outside its validity"):
        tool.call({"command": "create", "path": "/memories/carol.txt", "file_text": "c\n"})
    assert team.state() == state

    body = edit(unsealed(team.raw()), author="carol", parent=anchor, when=int(team.clock.now))
    assert b"Vaultmem-Actor: carol" in body
    forged = team.put(forge(team.vault, body, carol))
    report = team.vault.verify()
    assert findings(report) == [("expired", forged)], report.problems
    assert report.commits == 2
    team.vault.configure_signers()
    assert_git_refuses(team, forged)
    assert assert_git_accepts(team, anchor) == "alice"


def test_compromised_revocation_voids_every_signature_of_the_key(team: Team) -> None:
    team.vault.configure_signers()  # configured first: the revocation refreshes git's files
    alices = [team.write("alice"), team.write("alice")]
    bobs = team.write("bob")
    for commit in alices:
        assert assert_git_accepts(team, commit) == "alice"
    assert team.vault.verify().ok

    team.clock.advance(30)
    team.vault.revoke_signer("alice", actor="ops", compromised=True, reason="key leaked")
    entry = next(s for s in team.vault.signers.entries if s.principal == "alice")
    assert entry.compromised and entry.revoked == int(team.clock.now)
    _, revoked_file = team.vault.allowed_signers_paths()
    assert team.keys["alice"].public.line in revoked_file.read_text()

    report = team.vault.verify()
    assert sorted(findings(report)) == sorted(("revoked", c) for c in alices), report.problems
    assert report.signed == 1
    for commit in alices:
        assert_git_refuses(team, commit)  # the revocation file
    assert assert_git_accepts(team, bobs) == "bob"


def test_unsigned_commits_count_until_signatures_are_required(team: Team) -> None:
    # before the policy: an unsigned writer is counted, not a finding
    plain = VaultMemoryTool(team.vault, actor="bob", session="unsigned")
    team.vault.sign_as("bob", None)
    team.clock.advance(30)
    plain.call({"command": "create", "path": "/memories/plain.txt", "file_text": "no signature\n"})
    unsigned_one = team.tip()
    team.vault.sign_as("bob", team.keys["bob"])
    team.write("alice")
    report = team.vault.verify()
    assert report.ok, report.problems
    assert (report.signed, report.unsigned) == (1, 1)

    team.clock.advance(30)
    team.vault.set_policy(actor="ops", require_signatures=True)
    team.clock.advance(30)
    # the tool whose actor lost its key is refused, and nothing is written
    team.vault.sign_as("alice", None)
    state = team.state()
    with pytest.raises(ToolError, match="requires signed commits") as info:
        team.tools["alice"].call({"command": "create", "path": "/memories/x.txt", "file_text": "x\n"})
    assert isinstance(info.value.__cause__, SigningError)
    with pytest.raises(SigningError, match="requires signed commits"):
        team.vault.undo(actor="alice")
    assert team.state() == state

    # the attacker writes an unsigned, sealed commit
    body = edit(unsealed(team.raw()), parent=team.tip(), when=int(team.clock.now))
    sneaked = team.put(forge(team.vault, body, None))
    assert split_signature(team.raw())[1] is None
    report = team.vault.verify()
    assert findings(report) == [("unsigned", sneaked)], report.problems
    assert report.commits == 3
    assert unsigned_one != sneaked
    assert (report.signed, report.unsigned) == (1, 2)


def test_main_moved_back_behind_a_checkpoint(team: Team) -> None:
    team.write("alice")
    team.write("bob")
    team.clock.advance(30)
    checkpoint = team.vault.checkpoint(actor="ops")
    team.write("alice")
    assert team.vault.verify(checkpoints=[checkpoint.text]).ok

    # the attacker moves main back two commits: behind the checkpoint's head
    git_ok(team.path, team.home, "update-ref", "refs/heads/main", "main~2")
    report = team.vault.verify(checkpoints=[checkpoint.text])
    assert findings(report) == [("checkpoint", checkpoint.head)], report.problems
    # and removes the checkpoints branch too: the copy kept outside still tells
    git_ok(team.path, team.home, "update-ref", "-d", "refs/heads/vaultmem-checkpoints")
    assert team.vault.verify().ok
    report = team.vault.verify(checkpoints=[checkpoint.text])
    assert findings(report) == [("checkpoint", checkpoint.head)], report.problems


@pytest.mark.parametrize("hiding", ["info/grafts", "shallow"])
def test_a_checkpoint_counts_the_commits_main_records_whatever_git_shows(team: Team, key: str, hiding: str) -> None:
    """A checkpoint's count is of the commits main reaches through the parents
    they record: a shallow or grafts file (which make git show fewer) does
    not lower it, so a checkpoint made meanwhile still proves as much."""
    for actor in ("alice", "bob", "alice"):
        team.write(actor)
    real = len(git_ok(team.path, team.home, "rev-list", "main").split())
    (team.path / hiding).write_text(git_ok(team.path, team.home, "rev-parse", "main~1").strip() + "\n")
    assert len(git_ok(team.path, team.home, "rev-list", "main").split()) == 2
    reopened = Vault.open(team.path, key=key, clock=team.clock)  # libgit2 reads the file when it opens a repository
    reopened.sign_as("ops", team.keys["ops"])
    checkpoint = reopened.checkpoint(actor="ops")
    assert checkpoint.commits == real
    (team.path / hiding).unlink()
    assert reopened.verify(checkpoints=[checkpoint.text]).ok


def test_tampered_checkpoint_text_is_a_bad_signature(team: Team) -> None:
    team.write("alice")
    team.write("bob")
    team.clock.advance(30)
    checkpoint = team.vault.checkpoint(actor="ops")
    assert f"commits {checkpoint.commits}\n" in checkpoint.text
    # claims a different head count: the signature no longer covers the text
    altered = checkpoint.text.replace(f"commits {checkpoint.commits}\n", f"commits {checkpoint.commits + 5}\n")
    report = team.vault.verify(checkpoints=[altered])
    assert findings(report) == [("bad signature", checkpoint.head)], report.problems
    # a flipped bit of the signature itself
    start = checkpoint.text.index("-----BEGIN SSH SIGNATURE-----")
    flipped = checkpoint.text[:start] + corrupt(checkpoint.text[start:].encode()).decode()
    report = team.vault.verify(checkpoints=[flipped])
    assert findings(report) == [("bad signature", checkpoint.head)], report.problems
    # the untouched text is good, and signed in a namespace of its own (never a commit's)
    assert team.vault.verify(checkpoints=[checkpoint.text]).ok
    assert parse_signature(checkpoint.text[start:].encode()).namespace == CHECKPOINT_NAMESPACE


def test_validity_boundaries_agree_with_git(team: Team) -> None:
    """Both ends of a key's window are included, by vaultmem as by
    ``ssh-keygen``: a signature at the second of a revocation counts, one a
    second later does not; a key starts counting at its valid-after second."""
    team.vault.configure_signers()
    base = team.write("alice")
    team.clock.advance(30)
    revoked_at = int(team.clock.now)
    team.vault.revoke_signer("alice", actor="ops")
    carol = SigningKey.generate()
    starts = revoked_at + 100
    team.vault.add_signer("carol", carol.public, actor="ops", valid_after=starts)
    made: dict[str, str] = {}
    cases = [
        ("alice", team.keys["alice"], revoked_at),
        ("alice", team.keys["alice"], revoked_at + 1),
        ("carol", carol, starts - 1),
        ("carol", carol, starts),
    ]
    for actor, key, when in cases:
        body = edit(unsealed(team.raw(base)), author=actor, parent=team.tip(), when=when)
        made[f"{actor}@{when}"] = team.put(forge(team.vault, body, key))
    report = team.vault.verify()
    assert sorted(findings(report)) == sorted(
        [("revoked", made[f"alice@{revoked_at + 1}"]), ("expired", made[f"carol@{starts - 1}"])]
    ), report.problems
    assert report.commits == 5
    assert report.signed == 3
    assert assert_git_accepts(team, made[f"alice@{revoked_at}"]) == "alice"
    assert_git_refuses(team, made[f"alice@{revoked_at + 1}"])
    assert_git_refuses(team, made[f"carol@{starts - 1}"])
    assert assert_git_accepts(team, made[f"carol@{starts}"]) == "carol"


def forge_signers_change(team: Team, sign_with: SigningKey | None, author: str) -> tuple[str, SigningKey]:
    """The attacker's change of the signers branch: ``mallory`` added as an
    operator, sealed with the vault key, signed with ``sign_with`` (or not)."""
    mallory = SigningKey.generate()
    now = int(team.clock.now)
    forged = team.vault.signers.add("mallory", mallory.public, now=now, by=author, operator=True)
    tree = store_tree(team.path, team.home, forged.files())
    tip = team.tip("vaultmem-signers")
    body = edit(unsealed(team.raw(tip)), tree=tree, parent=tip, author=author, when=now)
    raw = forge(team.vault, body, sign_with)
    return put(team.path, team.home, raw, branch="vaultmem-signers"), mallory


@pytest.mark.parametrize("signed_by", ["alice", None])
def test_verify_finds_a_signers_change_no_operator_signed(team: Team, signed_by: str | None) -> None:
    team.write("alice")
    team.clock.advance(30)
    key = team.keys[signed_by] if signed_by else None
    forged, _ = forge_signers_change(team, key, signed_by or "ops")
    report = team.vault.verify()
    expected = "wrong actor" if signed_by else "unsigned"
    assert findings(report) == [(expected, forged)], report.problems
    assert "signers branch" in str(report.findings[0])


def test_an_unauthorized_signers_change_does_not_reach_gits_allowed_signers(team: Team) -> None:
    """An attacker with the vault key alone adds their own key to the signers
    branch (an unsigned, sealed commit, as it could arrive by a pull).  verify
    names it (above); the files stock git checks against, and the writes
    vaultmem lets through, must not take the attacker for a signer."""
    team.write("alice")
    team.clock.advance(30)
    _, mallory = forge_signers_change(team, None, "ops")
    team.clock.advance(30)
    allowed, _ = team.vault.allowed_signers_paths()
    with pytest.raises(IntegrityError, match="signers list cannot be trusted"):
        team.vault.configure_signers()
    assert not allowed.exists() or mallory.public.line not in allowed.read_text()
    before = team.state()
    tool = VaultMemoryTool(team.vault, actor="mallory", signing_key=mallory)
    with pytest.raises(ToolError, match="signers list cannot be trusted"):
        tool.call({"command": "create", "path": "/memories/m.txt", "file_text": "mallory\n"})
    assert team.state() == before


# -- 3. authorization: refusals change nothing ---------------------------------------------


def test_the_first_signer_must_be_an_operator_adding_their_own_key(vault: Vault, vault_path: Path, home: Path) -> None:
    tool = VaultMemoryTool(vault, actor="alice")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    before = tips(vault_path, home), counts(vault_path, home)
    ops, other = SigningKey.generate(), SigningKey.generate()
    with pytest.raises(SigningError, match="has none"):
        vault.add_signer("ops", ops.public, actor="ops", operator=True)  # no signing key at all
    vault.sign_as("ops", ops)
    with pytest.raises(SigningError, match="first signer must be an operator"):
        vault.add_signer("ops", ops.public, actor="ops")  # not an operator
    with pytest.raises(SigningError, match="first signer must be an operator"):
        vault.add_signer("ops", other.public, actor="ops", operator=True)  # not the key that signs
    with pytest.raises(SigningError, match="first signer must be an operator"):
        vault.add_signer("boss", ops.public, actor="ops", operator=True)  # not the actor's own name
    assert (tips(vault_path, home), counts(vault_path, home)) == before
    assert not vault.signers
    assert "refs/heads/vaultmem-signers" not in before[0]

    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    assert [(s.principal, s.operator) for s in vault.signers.entries] == [("ops", True)]


def test_only_a_valid_operator_changes_the_signers(team: Team) -> None:
    vault = team.vault
    carol = SigningKey.generate()
    state = team.state()
    # alice signs (her key is valid) but is no operator
    with pytest.raises(SigningError, match="not a valid operator"):
        vault.add_signer("carol", carol.public, actor="alice")
    with pytest.raises(SigningError, match="not a valid operator"):
        vault.revoke_signer("bob", actor="alice")
    with pytest.raises(SigningError, match="not a valid operator"):
        vault.rotate_signer("alice", carol.public, actor="alice")
    assert team.state() == state

    # a second operator revokes the first, who can then change nothing
    ops2 = SigningKey.generate()
    vault.add_signer("ops2", ops2.public, actor="ops", operator=True)
    vault.sign_as("ops2", ops2)
    team.clock.advance(10)
    vault.revoke_signer("ops", actor="ops2")
    team.clock.advance(10)
    state = team.state()
    with pytest.raises(SigningError, match="not a valid operator"):
        vault.add_signer("carol", carol.public, actor="ops")
    with pytest.raises(SigningError, match="not a valid operator"):
        vault.revoke_signer("ops2", actor="ops")
    assert team.state() == state
    signers = vault.signers
    assert not signers.is_operator(team.keys["ops"].public, "ops", int(team.clock.now))
    assert signers.is_operator(ops2.public, "ops2", int(team.clock.now))
    assert team.vault.verify().ok


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a key",
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 rsa@host",
        "ssh-ed25519 not*base64!",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==",  # cut short
    ],
)
def test_a_public_key_that_is_not_one_is_refused(team: Team, text: str) -> None:
    state = team.state()
    with pytest.raises(VaultError) as info:
        team.vault.add_signer("carol", text, actor="ops")
    assert isinstance(info.value, BadKeyError)
    message = str(info.value)
    assert message.startswith("Error: ") and "key" in message
    assert team.state() == state


def test_bad_principal_names_are_refused(team: Team) -> None:
    state = team.state()
    for name in ("", "-dash", "has space", "new\nline", "x" * 101, "ünï"):
        with pytest.raises(VaultError, match="cannot name a signer"):
            team.vault.add_signer(name, SigningKey.generate().public, actor="ops")
    assert team.state() == state


def test_a_tool_whose_key_is_not_its_actors_signer_writes_nothing(team: Team) -> None:
    team.write("alice")
    state = team.state()
    stranger = VaultMemoryTool(team.vault, actor="carol", signing_key=SigningKey.generate())
    with pytest.raises(ToolError) as info:
        stranger.call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    message = str(info.value.content)
    assert "is not a signer of this vault" in message and "Nothing was changed" in message
    assert isinstance(info.value.__cause__, SigningError)
    # bob's key in a tool acting as alice: the key belongs to another signer
    swapped = VaultMemoryTool(team.vault, actor="alice", signing_key=team.keys["bob"])
    with pytest.raises(ToolError, match="belongs to another signer"):
        swapped.call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    assert team.state() == state


def test_require_signatures_takes_a_signed_policy_change(team: Team) -> None:
    team.vault.sign_as("ops", None)
    state = team.state()
    with pytest.raises(SigningError, match="signed policy change"):
        team.vault.set_policy(actor="ops", require_signatures=True)
    with pytest.raises(SigningError, match="signed policy change"):
        team.vault.set_policy(actor="nobody", require_signatures=True)
    assert team.state() == state
    assert team.vault.policy.require_signatures is False
    # the operator with their key can
    team.vault.sign_as("ops", team.keys["ops"])
    team.vault.set_policy(actor="ops", require_signatures=True)
    assert team.vault.policy.require_signatures is True
    policy_tip = team.tip("vaultmem-policy")
    team.vault.configure_signers()
    assert assert_git_accepts(team, policy_tip) == "ops"


def test_require_signatures_on_a_vault_without_signers(vault: Vault, vault_path: Path, home: Path) -> None:
    before = tips(vault_path, home), counts(vault_path, home)
    with pytest.raises(SigningError):
        vault.set_policy(actor="ops", require_signatures=True)
    # a key that no signers list names cannot sign it either
    vault.sign_as("ops", SigningKey.generate())
    with pytest.raises(SigningError, match="not a signer"):
        vault.set_policy(actor="ops", require_signatures=True)
    assert (tips(vault_path, home), counts(vault_path, home)) == before


def test_rotation_keeps_old_signatures_and_refuses_the_old_key(team: Team) -> None:
    team.vault.configure_signers()
    old_commits = [team.write("alice"), team.write("alice")]
    new_key = SigningKey.generate()
    team.clock.advance(30)
    team.vault.rotate_signer("alice", new_key.public, actor="ops")
    team.clock.advance(30)
    # the old key is refused from now on
    state = team.state()
    with pytest.raises(ToolError, match="outside its validity"):
        team.write("alice")
    assert team.state() == state
    # the new one works
    team.vault.sign_as("alice", new_key)
    rotated = team.write("alice")
    entries = [s for s in team.vault.signers.entries if s.principal == "alice"]
    assert [s.key for s in entries] == [team.keys["alice"].public, new_key.public]
    assert entries[0].valid_before == entries[1].valid_after

    report = team.vault.verify()
    assert report.ok, report.problems
    assert report.signed == 3
    for commit in old_commits:
        assert assert_git_accepts(team, commit) == "alice"
    result = verify_commit(team.path, team.home, rotated)
    assert result.returncode == 0 and new_key.public.fingerprint in result.stderr


# -- 4. key files: real OpenSSH keys ---------------------------------------------------


def ssh_keygen(*args: str, stdin: bytes | None = None, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C"}
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["ssh-keygen", *args], input=stdin, capture_output=True, env=env, check=False)


def test_save_writes_0600_and_refuses_to_overwrite(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "bot.key"
    line = key.save(path, comment="bot@host")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert line == key.public.line + " bot@host"
    assert (tmp_path / "bot.key.pub").read_text() == line + "\n"
    assert path.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    original = path.read_bytes()
    with pytest.raises(VaultError, match="it exists"):
        SigningKey.generate().save(path)
    assert path.read_bytes() == original
    assert SigningKey.load(path).public == key.public


def test_load_refuses_a_key_others_can_read(tmp_path: Path) -> None:
    path = tmp_path / "bot.key"
    SigningKey.generate().save(path)
    os.chmod(path, 0o644)
    with pytest.raises(BadKeyError, match="readable by others"):
        SigningKey.load(path)


def test_passphrase_protected_key(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "ops.key"
    key.save(path, passphrase="correct horse")
    assert SigningKey.load(path, "correct horse").public == key.public
    with pytest.raises(BadKeyError, match="protected by a passphrase"):
        SigningKey.load(path)
    with pytest.raises(BadKeyError) as info:
        SigningKey.load(path, "wrong horse")
    # a wrong passphrase is named as such, not as a file that is no key
    assert "passphrase" in str(info.value), str(info.value)


def test_ssh_keygen_reads_the_saved_keys(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plain, protected = SigningKey.generate(), SigningKey.generate()
    plain.save(tmp_path / "plain.key")
    protected.save(tmp_path / "protected.key", passphrase="s3cret")
    out = ssh_keygen("-y", "-f", str(tmp_path / "plain.key"), home=home)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split()[:2] == plain.public.line.split()
    out = ssh_keygen("-y", "-P", "s3cret", "-f", str(tmp_path / "protected.key"), home=home)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split()[:2] == protected.public.line.split()
    out = ssh_keygen("-y", "-P", "wrong", "-f", str(tmp_path / "protected.key"), home=home)
    assert out.returncode != 0
    # fingerprints agree with ssh-keygen -l
    out = ssh_keygen("-l", "-f", str(tmp_path / "plain.key.pub"), home=home)
    assert plain.public.fingerprint in out.stdout.decode()


def test_ssh_keygen_makes_keys_vaultmem_loads(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = tmp_path / "made"
    out = ssh_keygen("-q", "-t", "ed25519", "-N", "pw pw", "-C", "x", "-f", str(path), home=home)
    assert out.returncode == 0, out.stderr
    key = SigningKey.load(path, "pw pw")
    assert key.public.line.split() == (tmp_path / "made.pub").read_text().split()[:2]


def test_signatures_cross_check_with_ssh_keygen(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = SigningKey.generate()
    path = tmp_path / "bot.key"
    key.save(path)
    allowed = tmp_path / "allowed"
    allowed.write_text(f'bot namespaces="git" {key.public.line}\n')
    message = b"tree 0000\n\nmemory: create /memories/a.txt\n"

    # vaultmem signs, ssh-keygen verifies
    sig_file = tmp_path / "by-vaultmem.sig"
    sig_file.write_bytes(key.sign(message))
    verify = ["-Y", "verify", "-f", str(allowed), "-I", "bot", "-n", "git", "-s", str(sig_file)]
    out = ssh_keygen(*verify, stdin=message, home=home)
    assert out.returncode == 0, out.stderr
    assert b'Good "git" signature for bot' in out.stdout + out.stderr
    assert ssh_keygen(*verify, stdin=message + b"x", home=home).returncode != 0
    sig_file.write_bytes(key.sign(message, namespace="other"))
    assert ssh_keygen(*verify, stdin=message, home=home).returncode != 0

    # ssh-keygen signs, vaultmem checks
    data = tmp_path / "message"
    data.write_bytes(message)
    out = ssh_keygen("-Y", "sign", "-n", "git", "-f", str(path), str(data), home=home)
    assert out.returncode == 0, out.stderr
    made = (tmp_path / "message.sig").read_bytes()
    parsed = parse_signature(made)
    assert parsed.key == key.public and parsed.namespace == "git"
    parsed.check(message)
    with pytest.raises(SignatureError):
        parsed.check(message + b"x")
    with pytest.raises(SignatureError):
        parsed.check(message, namespace=CHECKPOINT_NAMESPACE)


_PROPERTY_KEY = SigningKey.generate()


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=st.binary(max_size=2048), other=st.binary(max_size=2048))
def test_sign_then_check_property(message: bytes, other: bytes) -> None:
    armored = _PROPERTY_KEY.sign(message)
    signature = parse_signature(armored)
    assert signature.key == _PROPERTY_KEY.public
    signature.check(message)
    if other != message:
        with pytest.raises(SignatureError):
            signature.check(other)
    with pytest.raises(SignatureError):
        signature.check(message, namespace=CHECKPOINT_NAMESPACE)


# -- 5. automatic checkpoints ----------------------------------------------------------


def checkpoint_counts(team: Team) -> list[int]:
    """The commit counts of the checkpoints on the checkpoints branch, oldest first."""
    kept = rev_list(team.path, team.home, "vaultmem-checkpoints")
    if not kept:
        return []
    text = git_ok(team.path, team.home, "show", "refs/heads/vaultmem-checkpoints:checkpoints")
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith("commits ")]


def test_checkpoint_every_n_commits(team: Team) -> None:
    every = 3
    team.write("alice")
    team.clock.advance(30)
    team.vault.set_policy(actor="ops", checkpoint_every=every)
    assert checkpoint_counts(team) == []
    for n in range(1, 8):
        team.write("alice" if n % 2 else "bob")
        made = checkpoint_counts(team)
        # the first signed commit after the policy makes one; then every `every` commits
        assert made == list(range(2, 2 + n, every)), (n, made)
        assert len(rev_list(team.path, team.home, "vaultmem-checkpoints")) == len(made)
    heads = rev_list(team.path, team.home, "main")
    assert len(heads) == 8
    team.vault.configure_signers()
    for commit in rev_list(team.path, team.home, "vaultmem-checkpoints"):
        assert assert_git_accepts(team, commit) in {"alice", "bob"}
    report = team.vault.verify()
    assert report.ok, report.problems


def test_no_checkpoints_without_a_signing_key(vault: Vault, vault_path: Path, home: Path, clock: FakeClock) -> None:
    vault.set_policy(actor="ops", checkpoint_every=2)
    tool = VaultMemoryTool(vault, actor="bot")
    for n in range(6):
        clock.advance(30)
        tool.call({"command": "create", "path": f"/memories/{n}.txt", "file_text": f"{n}\n"})
    assert len(rev_list(vault_path, home, "main")) == 6
    assert rev_list(vault_path, home, "vaultmem-checkpoints") == []
    assert stock_git(vault_path, home, "rev-parse", "--verify", "refs/heads/vaultmem-checkpoints").returncode != 0
    report = vault.verify()
    assert report.ok and (report.signed, report.unsigned) == (0, 0)


def test_signers_round_trip(team: Team) -> None:
    """The signers list as stored reads back the same, and every change on its
    branch is signed by an operator (checked by verify)."""
    signers = team.vault.signers
    assert Signers.from_bytes(signers.to_bytes()) == signers
    assert [s.principal for s in signers.entries] == ["ops", "alice", "bob"]
    assert [s.added_by for s in signers.entries] == ["ops", "ops", "ops"]


def test_an_actor_no_signer_can_be_named_is_told_so_not_to_get_a_key(team: Team) -> None:
    """Signer names are ASCII: an actor such as 'Zoë' can never be a signer.
    Under require_signatures it was told to give --signing-key, and with a
    key that an operator should `signer add` it, which is refused."""
    team.clock.advance(30)
    team.vault.set_policy(actor="ops", require_signatures=True)
    state = team.state()
    unsigned = VaultMemoryTool(team.vault, actor="Zoë")
    with pytest.raises(ToolError, match="'Zoë' cannot be a signer: a signer's name is its actor name") as info:
        unsigned.call({"command": "create", "path": "/memories/z.txt", "file_text": "z\n"})
    assert isinstance(info.value.__cause__, SigningError)
    keyed = VaultMemoryTool(team.vault, actor="Zoë", signing_key=SigningKey.generate())
    with pytest.raises(ToolError, match="'Zoë' cannot sign: a signer's name is its actor name"):
        keyed.call({"command": "create", "path": "/memories/z.txt", "file_text": "z\n"})
    assert team.state() == state
