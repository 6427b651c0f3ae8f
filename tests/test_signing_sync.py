"""Sharing a signed vault: the signers and checkpoints branches travel with
push, pull and clone, merges made by a pull are signed by the pulling
actor, and stock git checks every clone's signatures with the files
``configure_signers`` writes (docs/signing.md, docs/sync.md).

Real servers: bare repositories by path and ``git http-backend`` behind
basic auth on 127.0.0.1 (tests/githttp.py).  Two or three clones stand for
hosts; they share one fake clock so signer validity reads the same on all.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FakeClock, commit_count, git
from githttp import git_http

from vaultmem import ConflictError, NotFoundError, SigningError, SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.repo.signed import write_signers

BRANCHES = (
    "refs/heads/main",
    "refs/heads/vaultmem-keyring",
    "refs/heads/vaultmem-policy",
    "refs/heads/vaultmem-signers",
    "refs/heads/vaultmem-checkpoints",
)


def server(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "config", "receive.denyNonFastForwards", "true"], check=True)
    return path


def write(vault: Vault, name: str, text: str, actor: str, key: SigningKey | None = None) -> None:
    VaultMemoryTool(vault, actor=actor, session="s", signing_key=key).call(
        {"command": "create", "path": f"/memories/{name}", "file_text": text}
    )


def refs(vault: Vault) -> dict[str, str | None]:
    """Where each of the vault's branches points (None: absent)."""
    found: dict[str, str | None] = {}
    for ref in BRANCHES:
        out = git(vault.path, "rev-parse", "--verify", "-q", ref, check=False).strip()
        found[ref] = out or None
    return found


def verify_commit(vault: Vault, rev: str) -> subprocess.CompletedProcess[str]:
    """Stock ``git verify-commit``, with only the vault's own git config."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(vault.path), "verify-commit", rev], capture_output=True, text=True, env=env)


def main_commits(vault: Vault) -> list[str]:
    return git(vault.path, "rev-list", "refs/heads/main").split()


@dataclass
class Site:
    """A server and the first host's vault: the operator ``ops`` added
    themself, the agent ``bot`` and the syncing identity ``sync-b``."""

    remote: Path
    key: str
    clock: FakeClock
    ops: SigningKey
    bot: SigningKey
    sync_b: SigningKey
    first: Vault

    def clone(self, target: Path, url: str | None = None) -> Vault:
        return Vault.clone(url or str(self.remote), target, key=self.key, clock=self.clock)


@pytest.fixture
def site(tmp_path: Path, clock: FakeClock) -> Site:
    key = generate_key()
    ops, bot, sync_b = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    first = Vault.init(tmp_path / "first.vault", key=key, clock=clock)
    first.sign_as("ops", ops)
    first.add_signer("ops", ops.public, actor="ops", operator=True)
    clock.advance(1)
    first.add_signer("bot", bot.public, actor="ops")
    first.add_signer("sync-b", sync_b.public, actor="ops")
    clock.advance(1)
    write(first, "a.txt", "from the operator\n", "ops", ops)
    first.add_remote("origin", str(server(tmp_path / "server.git")))
    return Site(tmp_path / "server.git", key, clock, ops, bot, sync_b, first)


@pytest.mark.parametrize("transport", ["path", "http"])
def test_signers_travel_and_every_host_verifies_the_others_signatures(
    site: Site, tmp_path: Path, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = site.first
    with contextlib.ExitStack() as stack:
        url = str(site.remote)
        if transport == "http":
            monkeypatch.setenv("VAULTMEM_GIT_USERNAME", "agent")
            monkeypatch.setenv("VAULTMEM_GIT_PASSWORD", "pw-7731")
            base, requests = stack.enter_context(git_http(site.remote.parent, "agent", "pw-7731"))
            url = f"{base}/{site.remote.name}"
            first.remove_remote("origin")
            first.add_remote("origin", url)
        pushed = first.push()
        assert {"main", "vaultmem-keyring", "vaultmem-signers"} <= set(pushed.moved)
        assert git(site.remote, "rev-parse", "vaultmem-signers").strip() == refs(first)["refs/heads/vaultmem-signers"]
        second = site.clone(tmp_path / "second.vault", url)
        assert second.signers == first.signers
        assert [(s.principal, s.key.fingerprint, s.operator) for s in second.signers.entries] == [
            ("ops", site.ops.public.fingerprint, True),
            ("bot", site.bot.public.fingerprint, False),
            ("sync-b", site.sync_b.public.fingerprint, False),
        ]
        site.clock.advance(5)
        write(second, "b.txt", "from the agent on host B\n", "bot", site.bot)
        assert set(second.push().moved) == {"main"}
        assert first.pull().moved["main"][1] == str(second.head())
        assert first.read("/memories/b.txt") == "from the agent on host B\n"
        if transport == "http":
            assert any("git-receive-pack" in line for line in requests)
    for vault in (first, second):
        report = vault.verify()
        assert report.ok, report.findings
        assert report.signed == report.commits == commit_count(vault.path) == 2
        assert report.unsigned == 0
    # stock git on the clone, with only what configure_signers wrote
    assert verify_commit(second, "main").returncode != 0  # no allowed-signers file yet: git cannot check
    allowed, revoked = second.configure_signers()
    assert git(second.path, "config", "gpg.ssh.allowedSignersFile").strip() == str(allowed)
    assert allowed.is_file() and revoked.is_file()
    checked = verify_commit(second, "main")
    assert checked.returncode == 0, checked.stderr
    assert f'Good "git" signature for bot with ED25519 key {site.bot.public.fingerprint}' in checked.stderr
    older = verify_commit(second, "main~1")
    assert older.returncode == 0 and 'Good "git" signature for ops' in older.stderr


def test_a_pulls_merge_commit_is_signed_by_the_pulling_actor(site: Site, tmp_path: Path) -> None:
    first = site.first
    first.push()
    second = site.clone(tmp_path / "second.vault")
    second.configure_signers()
    site.clock.advance(5)
    write(first, "from-a.txt", "a\n", "ops", site.ops)
    first.push()
    write(second, "from-b.txt", "b\n", "bot", site.bot)
    ours, theirs = str(second.head()), git(site.remote, "rev-parse", "main").strip()
    site.clock.advance(5)
    second.sign_as("sync-b", site.sync_b)
    pulled = second.pull(actor="sync-b")
    assert pulled.merge is not None and pulled.merge.commit == str(second.head())
    assert git(second.path, "rev-parse", "main^1", "main^2").split() == [ours, theirs]
    raw = git(second.path, "cat-file", "commit", "main")
    assert "\ngpgsig -----BEGIN SSH SIGNATURE-----" in raw
    assert git(second.path, "log", "-1", "--format=%an", "main").strip() == "sync-b"
    checked = verify_commit(second, "main")
    assert checked.returncode == 0, checked.stderr
    assert 'Good "git" signature for sync-b' in checked.stderr
    for rev in main_commits(second):
        assert verify_commit(second, rev).returncode == 0, rev
    report = second.verify()
    assert report.ok, report.findings
    assert report.signed == report.commits == 4 and report.unsigned == 0
    assert second.read("/memories/from-a.txt") == "a\n" and second.read("/memories/from-b.txt") == "b\n"
    second.push()
    first.pull()
    assert first.verify().ok and str(first.head()) == str(second.head())


def test_under_require_signatures_a_pull_that_must_merge_needs_a_signing_key(site: Site, tmp_path: Path) -> None:
    first = site.first
    first.set_policy(actor="ops", require_signatures=True)
    first.push()
    second = site.clone(tmp_path / "second.vault")
    assert second.policy.require_signatures is True
    site.clock.advance(5)
    write(first, "from-a.txt", "a\n", "ops", site.ops)
    first.push()
    write(second, "from-b.txt", "b\n", "bot", site.bot)
    before = refs(second)
    with pytest.raises(SigningError, match="require") as refused:
        second.pull(actor="host-b")  # host-b has no key: its merge commit would be unsigned
    assert "Nothing was changed" in str(refused.value)
    assert refs(second) == before
    assert commit_count(second.path) == 2  # its own write and the one before; no merge
    with pytest.raises(NotFoundError):
        second.read("/memories/from-a.txt")
    second.sign_as("sync-b", site.sync_b)
    pulled = second.pull(actor="sync-b")
    assert pulled.merge is not None
    assert second.read("/memories/from-a.txt") == "a\n"
    report = second.verify()
    assert report.ok, report.findings
    assert report.unsigned == 0 and report.signed == report.commits


def test_a_signer_change_pulled_into_a_clone_refreshes_its_allowed_signers(site: Site, tmp_path: Path) -> None:
    first = site.first
    first.push()
    configured = site.clone(tmp_path / "configured.vault")
    plain = site.clone(tmp_path / "plain.vault")
    allowed, revoked = configured.configure_signers()
    carol = SigningKey.generate()
    carol_b64 = carol.public.line.split()[1]
    assert carol_b64 not in allowed.read_text()
    site.clock.advance(5)
    first.add_signer("carol", carol.public, actor="ops")
    first.revoke_signer("bot", actor="ops", compromised=True, reason="leaked")
    first.push()
    for vault in (configured, plain):
        assert "vaultmem-signers" in vault.pull().moved
        assert [s.principal for s in vault.signers.entries] == ["ops", "bot", "sync-b", "carol"]
    text = allowed.read_text()
    assert "carol namespaces=" in text and carol_b64 in text
    assert site.bot.public.line.split()[1] not in text  # compromised: out of the allowed signers
    assert site.bot.public.line.split()[1] in revoked.read_text()
    # a clone never set up for stock git gets no files written behind its back
    plain_allowed, plain_revoked = plain.allowed_signers_paths()
    assert not plain_allowed.exists() and not plain_revoked.exists()
    assert git(plain.path, "config", "gpg.ssh.allowedSignersFile", check=False) == ""
    # and carol, pulled in, now writes on the configured clone in a way stock git accepts
    site.clock.advance(5)
    write(configured, "c.txt", "carol\n", "carol", carol)
    checked = verify_commit(configured, "main")
    assert checked.returncode == 0 and 'Good "git" signature for carol' in checked.stderr


def test_signers_changed_on_both_sides_refuse_the_pull(site: Site, tmp_path: Path) -> None:
    first = site.first
    first.push()
    second = site.clone(tmp_path / "second.vault")
    second.sign_as("ops", site.ops)  # the same operator, on another host
    site.clock.advance(5)
    first.add_signer("carol", SigningKey.generate().public, actor="ops")
    first.push()
    second.add_signer("dave", SigningKey.generate().public, actor="ops")
    before, signers = refs(second), second.signers
    with pytest.raises(ConflictError, match="signers were changed both here and on 'origin'") as refused:
        second.pull(actor="ops")
    assert "Nothing was changed" in str(refused.value)
    assert refs(second) == before
    assert second.signers == signers
    assert [s.principal for s in second.signers.entries] == ["ops", "bot", "sync-b", "dave"]
    with pytest.raises(ConflictError):
        second.push()  # and the server keeps the other side's change
    assert "carol" in git(site.remote, "log", "-1", "--format=%s", "vaultmem-signers")


def checkpoints_on(path: Path, ref: str = "vaultmem-checkpoints") -> str:
    return git(path, "show", f"{ref}:checkpoints")


def test_checkpoints_made_on_both_clones_are_all_kept_by_a_pull(site: Site, tmp_path: Path) -> None:
    first = site.first
    first.push()
    second = site.clone(tmp_path / "second.vault")
    second.sign_as("bot", site.bot)
    site.clock.advance(5)
    write(first, "from-a.txt", "a\n", "ops", site.ops)
    made_a = first.checkpoint(actor="ops")
    assert made_a.head == str(first.head()) and made_a.commits == 2 and made_a.signer == "ops"
    first.push()
    assert checkpoints_on(site.remote) == made_a.text
    write(second, "from-b.txt", "b\n", "bot", site.bot)
    made_b = second.checkpoint(actor="bot")
    assert made_b.signer == "bot" and made_b.commits == 2
    site.clock.advance(5)
    second.sign_as("sync-b", site.sync_b)
    pulled = second.pull(actor="sync-b")
    assert {"main", "vaultmem-checkpoints"} <= set(pulled.moved)
    kept = checkpoints_on(second.path)
    assert made_a.text in kept and made_b.text in kept
    parents = git(second.path, "rev-list", "--parents", "-1", "vaultmem-checkpoints").split()
    assert len(parents) == 3  # a merge of both clones' checkpoint commits
    report = second.verify()
    assert report.ok, report.findings
    second.push()
    first.pull()
    assert checkpoints_on(first.path) == kept
    assert first.verify(checkpoints=[made_a.text, made_b.text]).ok


def test_main_moved_back_on_the_server_shows_in_a_fresh_clone(site: Site, tmp_path: Path) -> None:
    first = site.first
    site.clock.advance(5)
    write(first, "b.txt", "two\n", "bot", site.bot)
    made = first.checkpoint(actor="ops")
    first.push()
    assert checkpoints_on(site.remote) == made.text
    # someone with write access to the server moves main back behind the checkpoint
    git(site.remote, "update-ref", "refs/heads/main", "main~1")
    fresh = site.clone(tmp_path / "fresh.vault")
    assert commit_count(fresh.path) == 1
    assert checkpoints_on(fresh.path) == made.text  # the checkpoints came from the server
    report = fresh.verify()
    assert not report.ok
    kinds = [f.kind for f in report.findings]
    assert kinds == ["checkpoint"], report.findings
    assert made.head[:12] in report.findings[0].detail


def test_a_signers_change_no_operator_signed_is_refused_by_a_pull(site: Site, tmp_path: Path) -> None:
    """Someone with the vault key alone adds their own key as an operator, on
    a clone of their own, and pushes it: every other clone refuses the pull."""
    first = site.first
    first.push()
    second = site.clone(tmp_path / "second.vault")
    evil = site.clone(tmp_path / "evil.vault")
    mallory = SigningKey.generate()
    site.clock.advance(5)
    now = int(site.clock.now)
    forged = evil.signers.add("mallory", mallory.public, now=now, by="mallory", operator=True)
    with evil._lock.hold():  # the library would refuse: written as an attacker would, sealed and self-signed
        write_signers(evil._commits, evil._seal, mallory.sign, forged, "signers: add mallory", [], "mallory", None, now)
    evil.push()
    before = refs(second)
    with pytest.raises(ConflictError, match="has a change no operator signed") as refused:
        second.pull(actor="ops")
    assert "nothing was changed" in str(refused.value)
    assert refs(second) == before
    assert [s.principal for s in second.signers.entries] == ["ops", "bot", "sync-b"]


def test_a_pull_refused_for_want_of_a_key_moves_no_branch_the_keyring_included(site: Site, tmp_path: Path) -> None:
    """The refusal comes before anything moves: a new data key on the server
    (its keyring ahead) stays on the server until the pull can be signed."""
    first = site.first
    first.set_policy(actor="ops", require_signatures=True)
    first.push()
    second = site.clone(tmp_path / "second.vault")
    site.clock.advance(5)
    first.rotate_key(actor="ops")
    write(first, "from-a.txt", "a\n", "ops", site.ops)
    first.push()
    write(second, "from-b.txt", "b\n", "bot", site.bot)
    before = refs(second)
    with pytest.raises(SigningError, match="require"):
        second.pull(actor="host-b")
    assert refs(second) == before  # the keyring among them
