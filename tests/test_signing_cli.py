"""Signed commits from the command line, as an operator runs it: ``vaultmem
signer ...``, ``checkpoint``, ``verify`` and ``git-setup`` as real
subprocesses in a clean environment (its own HOME, the vault and key from
VAULTMEM_VAULT and VAULTMEM_KEY), then stock ``git`` and ``ssh-keygen``
checking what an auditor sees (docs/signing.md).

These commands run on the real clock.  A signer's window includes both of
its ends (as ssh-keygen reads them), so a write in the very second of a
rotation or revocation may still count: no test asserts a refusal that
depends on the second it ran in.  Signer changes that follow each other
wait for the next second, as an operator's do (the one-second window is
test_a_key_rotated_and_revoked_in_one_second_still_verifies_with_stock_git,
on a fake clock).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key

SIGNATURE = "\ngpgsig -----BEGIN SSH SIGNATURE-----"


@dataclass
class Operator:
    """One operator's shell: a home folder to work in, a vault, its key."""

    home: Path
    key: str = field(default_factory=generate_key)

    @property
    def vault(self) -> Path:
        return self.home / "v.vault"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "GIT_"))}
        env.update(
            HOME=str(self.home),
            GIT_CONFIG_NOSYSTEM="1",  # only the vault's own git config counts
            VAULTMEM_VAULT=str(self.vault),
            VAULTMEM_KEY=self.key,
        )
        env.update(extra)
        return env

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vaultmem", *args],
            capture_output=True,
            text=True,
            env=self.env(**env),
            cwd=self.home,
            check=False,
        )

    def ok(self, *args: str, **env: str) -> str:
        done = self.run(*args, **env)
        assert done.returncode == 0, f"vaultmem {' '.join(args)}: {done.stderr}"
        assert "Traceback" not in done.stderr
        return done.stdout

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.ok(*args, "--json", **env))

    def refused(self, *args: str, **env: str) -> str:
        """The one-line error of a command that must exit 2."""
        done = self.run(*args, **env)
        assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
        assert done.stderr.startswith("vaultmem: ") and done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr
        return done.stderr

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Stock git on the vault, with nothing but the vault's own config."""
        done = subprocess.run(
            ["git", "-C", str(self.vault), *args], capture_output=True, text=True, env=self.env(), check=False
        )
        if check:
            assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
        return done

    def rev(self, name: str) -> str:
        return self.git("rev-parse", "--verify", "-q", name, check=False).stdout.strip()

    def count(self) -> int:
        out = self.git("rev-list", "--count", "refs/heads/main", check=False).stdout.strip()
        return int(out) if out else 0  # no main yet: an empty vault

    def verify_commit(self, rev: str) -> subprocess.CompletedProcess[str]:
        return self.git("verify-commit", rev, check=False)

    def write(self, name: str, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
        call = json.dumps({"command": "create", "path": f"/memories/{name}", "file_text": f"{name}\n"})
        return self.run("call", call, *options, **env)

    def allowed(self) -> str:
        configured = self.git("config", "gpg.ssh.allowedSignersFile").stdout.strip()
        return Path(configured).read_text()

    def revoked(self) -> str:
        configured = self.git("config", "gpg.ssh.revocationFile").stdout.strip()
        return Path(configured).read_text()

    def public(self, name: str) -> str:
        """The base64 of a public key file, as allowed-signers lines hold it."""
        return (self.home / f"{name}.key.pub").read_text().split()[1]


def private(passphrase: Path, text: str) -> Path:
    passphrase.write_text(text + "\n")
    passphrase.chmod(0o600)
    return passphrase


@pytest.fixture
def op(tmp_path: Path) -> Operator:
    return Operator(tmp_path)


@pytest.fixture
def signed(op: Operator) -> Operator:
    """The README's setup, made quickly in Python (test_the_readme_flow runs
    it command by command): a vault, the operator ops (added by themself)
    and the agent bot, their key files beside it, set up for stock git."""
    keys = {}
    for name in ("ops", "bot"):
        keys[name] = SigningKey.generate()
        keys[name].save(op.home / f"{name}.key", comment=name)
    with Vault.init(op.vault, key=op.key) as vault:
        vault.sign_as("ops", keys["ops"])
        vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
        vault.add_signer("bot", keys["bot"].public, actor="ops")
    assert "git verify-commit" in op.ok("git-setup")
    return op


def next_second() -> None:
    """Wait for the wall clock's next second, so a signer change made now
    never shares its second with the one before (see
    test_a_key_rotated_and_revoked_in_one_second_still_verifies_with_stock_git)."""
    start = int(time.time())
    while int(time.time()) == start:
        time.sleep(0.02)


# -- signer new ---------------------------------------------------------------------


def test_signer_new_writes_a_private_key_and_its_public_key(op: Operator) -> None:
    said = op.ok("signer", "new", "ops")  # no vault needed
    assert not op.vault.exists()
    key, pub = op.home / "ops.key", op.home / "ops.key.pub"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    line = pub.read_text().strip()
    assert line.startswith("ssh-ed25519 AAAA") and line.endswith(" ops")
    assert line in said and "vaultmem signer add ops ops.key.pub" in said
    # stock ssh-keygen reads the private key and derives the same public key
    derived = subprocess.run(["ssh-keygen", "-y", "-P", "", "-f", str(key)], capture_output=True, text=True)
    assert derived.returncode == 0, derived.stderr
    assert derived.stdout.split()[:2] == line.split()[:2]

    (op.home / "keys").mkdir()
    made = op.json("signer", "new", "bot", "--out", "keys/bot-1.key")
    assert set(made) == {"name", "key_file", "public_file", "public", "fingerprint", "passphrase"}
    assert made["name"] == "bot" and made["passphrase"] is False
    assert made["key_file"] == "keys/bot-1.key" and made["public_file"] == "keys/bot-1.key.pub"
    assert (op.home / "keys" / "bot-1.key").stat().st_mode & 0o777 == 0o600
    assert (op.home / "keys" / "bot-1.key.pub").read_text().strip() == made["public"]
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(op.home / "keys" / "bot-1.key.pub")], capture_output=True)
    assert listed.stdout.decode().split()[1] == made["fingerprint"]
    assert made["fingerprint"].startswith("SHA256:")
    assert not (op.home / "bot.key").exists()


def test_signer_new_never_overwrites_a_key(op: Operator) -> None:
    op.ok("signer", "new", "ops")
    before = {p.name: p.read_bytes() for p in op.home.iterdir()}
    err = op.refused("signer", "new", "ops")
    assert "ops.key exists" in err
    assert {p.name: p.read_bytes() for p in op.home.iterdir()} == before
    # someone's public key alone is enough to refuse: the pair would not match
    (op.home / "bot.key.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeep someone\n")
    err = op.refused("signer", "new", "bot")
    assert "bot.key.pub exists" in err
    assert not (op.home / "bot.key").exists()
    assert (op.home / "bot.key.pub").read_text() == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeep someone\n"
    op.refused("signer", "new", "no/such bad name")  # not a principal name: nothing written
    assert sorted(p.name for p in op.home.iterdir()) == ["bot.key.pub", "ops.key", "ops.key.pub"]


def test_a_key_with_a_passphrase_signs_only_once_opened(signed: Operator) -> None:
    op = signed
    words = private(op.home / "carol.pass", "correct horse battery")
    made = op.json("signer", "new", "carol", "--new-passphrase-file", str(words))
    assert made["passphrase"] is True
    key = op.home / "carol.key"
    for given, works in (("", False), ("wrong", False), ("correct horse battery", True)):
        opened = subprocess.run(["ssh-keygen", "-y", "-P", given, "-f", str(key)], capture_output=True, text=True)
        assert (opened.returncode == 0) is works, (given, opened.stderr)
    op.ok("signer", "add", "carol", "carol.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    count = op.count()
    call = json.dumps({"command": "create", "path": "/memories/one.txt", "file_text": "one\n"})
    err = op.refused("call", call, "--actor", "carol", "--signing-key", "carol.key")
    assert "passphrase" in err and op.count() == count
    wrong = private(op.home / "wrong.pass", "wrong")
    op.refused("call", call, "--actor", "carol", "--signing-key", "carol.key", "--signing-passphrase-file", str(wrong))
    assert op.count() == count
    by_file = op.write(
        "one.txt", "--actor", "carol", "--signing-key", "carol.key", "--signing-passphrase-file", "carol.pass"
    )
    assert by_file.returncode == 0, by_file.stderr
    by_env = op.write("two.txt", VAULTMEM_SIGNING_KEY="carol.key", VAULTMEM_SIGNING_PASSPHRASE="correct horse battery")
    assert by_env.returncode != 0  # the key is carol's, the default actor is cli: refused
    assert op.count() == count + 1
    by_env = op.write(
        "two.txt",
        "--actor",
        "carol",
        VAULTMEM_SIGNING_KEY="carol.key",
        VAULTMEM_SIGNING_PASSPHRASE="correct horse battery",
    )
    assert by_env.returncode == 0, by_env.stderr
    assert op.count() == count + 2
    for rev in ("main", "main~1"):
        checked = op.verify_commit(rev)
        assert checked.returncode == 0 and 'Good "git" signature for carol' in checked.stderr


def test_a_wrong_passphrase_is_named_as_such(op: Operator) -> None:
    words = private(op.home / "bot.pass", "correct horse battery")
    op.ok("signer", "new", "bot", "--new-passphrase-file", str(words))
    op.ok("init")
    wrong = private(op.home / "wrong.pass", "wrong horse")
    call = json.dumps({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    err = op.refused(
        "call", call, "--actor", "bot", "--signing-key", "bot.key", "--signing-passphrase-file", str(wrong)
    )
    assert "the passphrase does not open the signing key" in err, err
    assert op.count() == 0


# -- the README's flow ------------------------------------------------------------------


def test_the_readme_flow_signs_every_write_and_stock_git_checks_it(op: Operator) -> None:
    assert op.ok("init").startswith("Created an empty vault")
    op.ok("signer", "new", "ops")
    op.ok("signer", "new", "bot")
    said = op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    assert said.startswith("Added ops as an operator with key SHA256:")
    said = op.ok("signer", "add", "bot", "bot.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    assert said.startswith("Added bot as a signer with key SHA256:")
    setup = op.json("git-setup")
    assert setup["signers"] == 2
    allowed_file = Path(op.git("config", "gpg.ssh.allowedSignersFile").stdout.strip())
    assert allowed_file.is_absolute() and allowed_file.is_file() and str(allowed_file) == setup["allowed_signers"]
    assert Path(op.git("config", "gpg.ssh.revocationFile").stdout.strip()).is_file()
    assert op.git("config", "gpg.format").stdout.strip() == "ssh"
    assert op.public("ops") in allowed_file.read_text() and op.public("bot") in allowed_file.read_text()
    by_flag = op.write("a.txt", "--actor", "bot", "--signing-key", "bot.key")
    assert by_flag.stdout == "File created successfully at: /memories/a.txt\n", by_flag.stderr
    by_env = op.write("b.txt", "--actor", "bot", VAULTMEM_SIGNING_KEY="bot.key")
    assert by_env.returncode == 0, by_env.stderr
    key_text = (op.home / "bot.key").read_text()
    by_text = op.write("c.txt", "--actor", "bot", VAULTMEM_SIGNING_KEY=key_text)
    assert by_text.returncode == 0, by_text.stderr
    commits = op.git("rev-list", "main").stdout.split()
    assert len(commits) == 3
    for commit in commits:
        assert SIGNATURE in op.git("cat-file", "commit", commit).stdout
        checked = op.verify_commit(commit)
        assert checked.returncode == 0, checked.stderr
        assert 'Good "git" signature for bot with ED25519 key' in checked.stderr
    shown = op.git("log", "--show-signature", "main").stdout
    assert shown.count('Good "git" signature for bot') == 3
    report = op.json("verify")
    assert report["ok"] is True and report["signed"] == 3 and report["unsigned"] == 0 and report["findings"] == []
    assert "3 signatures: no problems found" in op.ok("verify")
    # the signers branch itself: each change signed by the operator, checked by stock git too
    for commit in op.git("rev-list", "vaultmem-signers").stdout.split():
        checked = op.verify_commit(commit)
        assert checked.returncode == 0 and 'Good "git" signature for ops' in checked.stderr


def test_an_unsigned_or_foreign_write_does_not_pass_stock_git(signed: Operator) -> None:
    op = signed
    assert op.write("plain.txt", "--actor", "bot").returncode == 0  # signatures are not required yet
    assert SIGNATURE not in op.git("cat-file", "commit", "main").stdout
    assert op.verify_commit("main").returncode != 0
    count = op.count()
    wrong = op.write("x.txt", "--actor", "bot", "--signing-key", "ops.key")  # ops's key, as bot
    assert wrong.returncode != 0 and "belongs to another signer" in wrong.stdout + wrong.stderr
    op.ok("signer", "new", "stranger")
    unknown = op.write("y.txt", "--actor", "stranger", "--signing-key", "stranger.key")
    assert unknown.returncode != 0 and "not a signer" in unknown.stdout + unknown.stderr
    assert op.count() == count


# -- list, rotate, revoke -------------------------------------------------------------


def signer_rows(op: Operator) -> list[dict[str, Any]]:
    rows = op.json("signer", "list")["signers"]
    assert isinstance(rows, list)
    return rows


def test_signer_list_rotate_and_revoke_keep_gits_allowed_signers_current(signed: Operator) -> None:
    op = signed
    listed = op.ok("signer", "list").splitlines()
    assert len(listed) == 2
    assert listed[0].startswith("ops  operator  SHA256:") and listed[0].endswith("valid")
    assert listed[1].startswith("bot  signer  SHA256:") and listed[1].endswith("valid")
    rows = signer_rows(op)
    assert [(r["principal"], r["operator"], r["valid_now"]) for r in rows] == [
        ("ops", True, True),
        ("bot", False, True),
    ]
    fingerprints = {r["principal"]: r["fingerprint"] for r in rows}
    assert fingerprints["bot"] in listed[1] and fingerprints["ops"] in listed[0]
    assert op.write("one.txt", "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    first = op.rev("main")
    allowed = op.allowed()
    assert 'bot namespaces="git",valid-after="' in allowed and "valid-before" not in allowed

    op.ok("signer", "new", "bot2", "--out", "bot-2.key")
    next_second()
    said = op.ok("signer", "rotate", "bot", "bot-2.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    assert "from now on" in said
    rotated = op.allowed()
    assert rotated != allowed  # refreshed without running git-setup again
    new_b64 = (op.home / "bot-2.key.pub").read_text().split()[1]
    bot_lines = [line for line in rotated.splitlines() if line.startswith("bot ")]
    assert len(bot_lines) == 2
    assert op.public("bot") in bot_lines[0] and 'valid-before="' in bot_lines[0]
    assert new_b64 in bot_lines[1] and "valid-before" not in bot_lines[1]
    rows = signer_rows(op)
    assert [r["principal"] for r in rows] == ["ops", "bot", "bot"]
    assert rows[1]["valid_before"] is not None and rows[2]["valid_before"] is None and rows[2]["valid_now"] is True
    assert op.write("two.txt", "--actor", "bot", "--signing-key", "bot-2.key").returncode == 0
    second = op.rev("main")
    for commit in (first, second):  # the old key's commit was made inside its window: still good
        checked = op.verify_commit(commit)
        assert checked.returncode == 0 and 'Good "git" signature for bot' in checked.stderr

    next_second()
    said = op.ok("signer", "revoke", "bot", "--reason", "retired", "--actor", "ops", "--signing-key", "ops.key")
    assert "from now on do not count" in said
    revoked = op.allowed()
    assert revoked != rotated
    bot_lines = [line for line in revoked.splitlines() if line.startswith("bot ")]
    assert len(bot_lines) == 2 and all('valid-before="' in line for line in bot_lines)
    assert op.revoked() == ""  # not compromised: nothing for git's revocation file
    rows = signer_rows(op)
    assert rows[2]["revoked"] is not None and rows[2]["reason"] == "retired" and rows[2]["compromised"] is False
    for commit in (first, second):  # made before the revocation: they still count
        assert op.verify_commit(commit).returncode == 0
    assert op.json("verify")["ok"] is True
    assert op.git("log", "-1", "--format=%s", "vaultmem-signers").stdout.startswith("signers: revoke bot")


def test_a_key_revoked_as_compromised_stops_counting_for_every_commit(signed: Operator) -> None:
    op = signed
    assert op.write("by-ops.txt", "--actor", "ops", "--signing-key", "ops.key").returncode == 0
    assert op.write("by-bot.txt", "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    by_ops, by_bot = op.rev("main~1"), op.rev("main")
    assert op.verify_commit(by_bot).returncode == 0
    said = op.ok(
        "signer", "revoke", "bot", "--compromised", "--reason", "leaked", "--actor", "ops", "--signing-key", "ops.key"
    )
    assert "compromised" in said
    assert op.public("bot") not in op.allowed()
    assert op.public("bot") in op.revoked()
    assert op.verify_commit(by_bot).returncode != 0  # git no longer accepts what the leaked key signed
    assert op.verify_commit(by_ops).returncode == 0
    rows = signer_rows(op)
    assert rows[1]["compromised"] is True and rows[1]["valid_now"] is False
    assert op.ok("signer", "list").splitlines()[1].endswith("revoked (compromised)")
    count = op.count()
    refused = op.write("again.txt", "--actor", "bot", "--signing-key", "bot.key")
    assert refused.returncode != 0 and "was revoked" in refused.stdout + refused.stderr
    assert op.count() == count
    checked = op.run("verify", "--json")
    assert checked.returncode == 1
    report = json.loads(checked.stdout)
    assert report["ok"] is False and [f["kind"] for f in report["findings"]] == ["revoked"]
    assert report["findings"][0]["version"] == by_bot


def test_only_an_operator_changes_the_signers(signed: Operator) -> None:
    op = signed
    op.ok("signer", "new", "carol")
    before = op.rev("vaultmem-signers")
    listed = op.ok("signer", "list")
    attempts = [
        ("signer", "add", "carol", "carol.key.pub", "--actor", "bot", "--signing-key", "bot.key"),
        ("signer", "add", "carol", "carol.key.pub", "--operator", "--actor", "carol", "--signing-key", "carol.key"),
        ("signer", "add", "carol", "carol.key.pub", "--actor", "ops"),  # the operator, without their key
        ("signer", "add", "carol", "carol.key.pub", "--actor", "bot", "--signing-key", "ops.key"),
        ("signer", "rotate", "ops", "carol.key.pub", "--actor", "bot", "--signing-key", "bot.key"),
        ("signer", "revoke", "ops", "--actor", "bot", "--signing-key", "bot.key"),
        ("signer", "revoke", "bot", "--compromised", "--actor", "bot", "--signing-key", "bot.key"),
    ]
    for argv in attempts:
        err = op.refused(*argv)
        assert "nothing was changed" in err.lower(), (argv, err)
        assert op.rev("vaultmem-signers") == before, argv
    assert op.ok("signer", "list") == listed
    assert "carol" not in op.allowed()


def test_the_first_signer_must_be_an_operator_adding_themself(op: Operator) -> None:
    op.ok("init")
    op.ok("signer", "new", "ops")
    op.ok("signer", "new", "bot")
    assert "No signers yet" in op.ok("signer", "list")
    for argv in (
        ("signer", "add", "bot", "bot.key.pub", "--actor", "bot", "--signing-key", "bot.key"),  # not an operator
        ("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "bot.key"),
    ):
        op.refused(*argv)
        assert op.rev("vaultmem-signers") == ""
    op.ok("signer", "add", "ops", "ops.key.pub", "--operator", "--actor", "ops", "--signing-key", "ops.key")
    assert op.rev("vaultmem-signers") != ""


# -- policy -------------------------------------------------------------------------------


def test_require_signatures_refuses_every_unsigned_write(signed: Operator) -> None:
    op = signed
    assert op.write("before.txt", "--actor", "bot").returncode == 0
    err = op.refused("policy", "set", "require_signatures=true", "--actor", "ops")
    assert "signing key" in err
    assert op.json("policy", "show")["require_signatures"] is False
    next_second()  # not the second of the unsigned write (see the test below)
    changed = op.json("policy", "set", "require_signatures=true", "--actor", "ops", "--signing-key", "ops.key")
    assert changed["changed"] == {"require_signatures": {"from": False, "to": True}}
    assert op.verify_commit("vaultmem-policy").returncode == 0  # the policy change itself is signed
    count = op.count()
    refused = op.write("unsigned.txt", "--actor", "bot")
    assert refused.returncode != 0
    assert "requires signed commits" in refused.stdout + refused.stderr
    assert op.count() == count
    assert op.write("signed.txt", "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    assert op.count() == count + 1 and op.verify_commit("main").returncode == 0
    # the unsigned write from before the policy is not a finding; verify counts it
    report = op.json("verify")
    assert report["ok"] is True and report["signed"] == 1 and report["unsigned"] == 1


def test_a_write_made_just_before_require_signatures_is_not_a_finding(tmp_path: Path) -> None:
    """An unsigned write the vault accepted, because signatures were not yet
    required, stays accepted by verify even when the policy changed within
    the same second."""
    clock = FakeClock()
    ops = SigningKey.generate()
    vault = Vault.init(tmp_path / "v.vault", key=generate_key(), clock=clock)
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    clock.advance(10)
    VaultMemoryTool(vault, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    vault.set_policy(actor="ops", require_signatures=True)  # the same second as the write
    report = vault.verify()
    assert report.unsigned == 1
    assert report.ok, report.findings


def test_policy_set_help_lists_the_signing_fields(op: Operator) -> None:
    text = op.ok("policy", "set", "--help")
    assert "require_signatures" in text and "checkpoint_every" in text
    assert "\nexample:\n" in text


# -- checkpoints -------------------------------------------------------------------------


def test_a_checkpoint_kept_outside_shows_main_moved_back(signed: Operator) -> None:
    op = signed
    for name in ("a.txt", "b.txt"):
        assert op.write(name, "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    err = op.refused("checkpoint", "--actor", "ops")
    assert "signing key" in err and op.rev("vaultmem-checkpoints") == ""
    kept = op.home / "vault.checkpoints"
    said = op.ok("checkpoint", "--actor", "ops", "--signing-key", "ops.key", "--out", str(kept))
    assert "appended to" in said
    first = kept.read_text()
    assert first.startswith("vaultmem checkpoint 1\n") and f"head {op.rev('main')}\n" in first
    assert "commits 2\n" in first and "signer ops\n" in first and "-----BEGIN SSH SIGNATURE-----" in first
    assert op.write("c.txt", "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    made = op.json("checkpoint", "--actor", "ops", "--signing-key", "ops.key", "--out", str(kept))
    assert made["head"] == op.rev("main") and made["commits"] == 3 and made["signer"] == "ops"
    assert kept.read_text() == first + made["text"]  # appended, the first kept as it was
    printed = op.ok("checkpoint", "--actor", "ops", "--signing-key", "ops.key")
    assert printed.startswith("vaultmem checkpoint 1\n") and printed.rstrip().endswith("-----END SSH SIGNATURE-----")
    assert op.run("verify", "--checkpoint", str(kept)).returncode == 0

    # someone with write access moves main back, and removes the vault's own record too
    op.git("update-ref", "refs/heads/main", "main~1")
    op.git("update-ref", "-d", "refs/heads/vaultmem-checkpoints")
    assert op.run("verify").returncode == 0  # nothing inside the vault can tell
    checked = op.run("verify", "--checkpoint", str(kept))
    assert checked.returncode == 1
    found = [line for line in checked.stdout.splitlines() if line.startswith("checkpoint:")]
    assert found and made["head"][:12] in found[0], checked.stdout
    as_json = op.run("verify", "--checkpoint", str(kept), "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and report["signed"] == 2 and report["unsigned"] == 0
    assert {f["kind"] for f in report["findings"]} == {"checkpoint"}
    missing = op.refused("verify", "--checkpoint", str(op.home / "nowhere"))
    assert "cannot read the checkpoint file" in missing


def test_checkpoint_every_signs_checkpoints_on_its_own(signed: Operator) -> None:
    op = signed
    op.ok("policy", "set", "checkpoint_every=2", "--actor", "ops", "--signing-key", "ops.key")
    assert op.write("unsigned.txt", "--actor", "bot").returncode == 0  # no key: no checkpoint
    assert op.rev("vaultmem-checkpoints") == ""
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        assert op.write(name, "--actor", "bot", "--signing-key", "bot.key").returncode == 0
    kept = op.git("show", "vaultmem-checkpoints:checkpoints").stdout
    counts = [int(line.split()[1]) for line in kept.splitlines() if line.startswith("commits ")]
    assert len(counts) >= 2 and counts == sorted(counts), kept
    assert all(b - a >= 2 for a, b in itertools.pairwise(counts)) and counts[-1] >= 4, counts
    assert kept.count("signer bot\n") == len(counts)
    for commit in op.git("rev-list", "vaultmem-checkpoints").stdout.split():
        checked = op.verify_commit(commit)
        assert checked.returncode == 0 and 'Good "git" signature for bot' in checked.stderr
    assert op.run("verify").returncode == 0


def test_a_key_rotated_and_revoked_in_one_second_still_verifies_with_stock_git(tmp_path: Path) -> None:
    """A key's window may be a single second (rotated in and revoked at the
    same second, both ends included).  What vaultmem's verify accepts, stock
    git must accept with the allowed-signers file git-setup writes."""
    clock = FakeClock()
    ops, bot, bot2 = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    vault = Vault.init(tmp_path / "v.vault", key=generate_key(), clock=clock)
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    vault.add_signer("bot", bot.public, actor="ops")
    vault.configure_signers()
    clock.advance(10)
    vault.rotate_signer("bot", bot2.public, actor="ops")
    VaultMemoryTool(vault, actor="bot", signing_key=bot2).call(
        {"command": "create", "path": "/memories/a.txt", "file_text": "a\n"}
    )
    vault.revoke_signer("bot", actor="ops")  # the same second as the rotation and the write
    report = vault.verify()
    assert report.ok and report.signed == 1, report.findings
    checked = subprocess.run(
        ["git", "-C", str(vault.path), "verify-commit", "main"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert 'Good "git" signature for bot' in checked.stderr


# -- help ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["signer new", "signer add", "signer rotate", "signer revoke", "signer list", "checkpoint", "verify", "git-setup"],
)
def test_each_signing_commands_help_has_an_example(op: Operator, command: str) -> None:
    text = op.ok(*command.split(), "--help")
    assert "\nexample:\n" in text
    example = text.split("\nexample:\n", 1)[1].strip().splitlines()[0].strip()
    assert example.startswith(f"vaultmem {command}")
    assert "--signing-key" in text


def test_signer_new_with_passphrase_reads_it_from_a_pipe_and_refuses_a_weak_one(signed: Operator) -> None:
    op = signed
    words = "correct horse battery staple"
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "signer", "new", "dora", "--passphrase", "--json"],
        input=words + "\n",
        capture_output=True,
        text=True,
        env=op.env(),
        cwd=op.home,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passphrase"] is True
    for given, works in (("", False), (words, True)):
        opened = subprocess.run(
            ["ssh-keygen", "-y", "-P", given, "-f", str(op.home / "dora.key")], capture_output=True, text=True
        )
        assert (opened.returncode == 0) is works, (given, opened.stderr)
    weak = subprocess.run(
        [sys.executable, "-m", "vaultmem", "signer", "new", "eve", "--passphrase"],
        input="short\n",
        capture_output=True,
        text=True,
        env=op.env(),
        cwd=op.home,
        check=False,
    )
    assert weak.returncode == 2 and "too weak" in weak.stderr
    assert not (op.home / "eve.key").exists() and not (op.home / "eve.key.pub").exists()
