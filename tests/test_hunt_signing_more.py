"""Signed commits as an auditor and an operator meet them (third hunt): a
policy change that only the vault key made, judged by verify and by the
writes after it; ``vaultmem chat`` signing with the key its options give;
the stock git check docs/signing.md gives an auditor for the signers branch;
private keys never echoed in errors; commits signed by keys of other types,
as stock git and verify judge them; and what checkpoint and passphrase
errors say.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock
from signing_helpers import (
    add_signature,
    clean_env,
    edit,
    forge,
    git_ok,
    put,
    raw_commit,
    seal,
    stock_git,
    store_tree,
    unsealed,
)
from test_signing_cli import Operator, op, signed  # noqa: F401 (fixtures)
from test_signing_hunt2 import home, keys, team, write  # noqa: F401 (fixtures)

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.errors import BadKeyError
from vaultmem.testing.replay import ReplayServer, reply, text, tool_use

# -- the policy branch ------------------------------------------------------------------


def _forge_policy_change(
    vault: Vault, vault_path: Path, git_home: Path, clock: FakeClock, signer: SigningKey | None
) -> str:
    """What someone holding the vault key alone can do with stock git: a
    policy change turning ``require_signatures`` off, sealed with the vault
    key, signed by ``signer`` (None: unsigned), put on the policy branch."""
    tip = git_ok(vault_path, git_home, "rev-parse", "vaultmem-policy").strip()
    text = git_ok(vault_path, git_home, "show", "vaultmem-policy:policy.json")
    assert '"require_signatures": true' in text
    off = text.replace('"require_signatures": true', '"require_signatures": false').encode()
    tree = store_tree(vault_path, git_home, [("policy.json", off)])
    body = edit(unsealed(raw_commit(vault_path, git_home, tip)), author="bot", when=int(clock()), parent=tip, tree=tree)
    return put(vault_path, git_home, forge(vault, body, signer), "vaultmem-policy")


@pytest.mark.parametrize("signer", ["none", "stranger"])
def test_a_policy_change_turning_off_required_signatures_without_a_valid_signature_is_a_finding(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
    home: Path,  # noqa: F811
    vault_path: Path,
    key: str,
    signer: str,
) -> None:
    team.set_policy(actor="ops", require_signatures=True)
    clock.advance(10)
    write(team, "bot", keys["bot"], "signed.md")
    clock.advance(10)
    stranger = SigningKey.generate() if signer == "stranger" else None
    forged = _forge_policy_change(team, vault_path, home, clock, stranger)
    clock.advance(10)
    # then an unsigned write, made the same way (vaultmem itself refuses it: the next test)
    tip = git_ok(vault_path, home, "rev-parse", "main").strip()
    body = edit(unsealed(raw_commit(vault_path, home, tip)), author="bot", when=int(clock()), parent=tip)
    unsigned_write = put(vault_path, home, forge(team, body, None))
    team.close()
    with Vault.open(vault_path, key=key, clock=clock) as vault:
        report = vault.verify()
    found = {(f.kind, f.version) for f in report.findings}
    expected = "unsigned" if stranger is None else "unknown signer"
    assert (expected, forged) in found, report.findings
    # the change does not count, so the policy still required signatures for the write after it
    assert ("unsigned", unsigned_write) in found, report.findings
    # stock git, with only the vault's allowed signers, does not pass the forged change either
    verdict = stock_git(vault_path, home, "verify-commit", forged)
    assert verdict.returncode != 0


@pytest.mark.parametrize("signer", ["none", "stranger"])
def test_writes_stay_refused_after_a_policy_change_without_a_valid_signature(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
    home: Path,  # noqa: F811
    vault_path: Path,
    key: str,
    signer: str,
) -> None:
    """The policy branch turned ``require_signatures`` off by someone with the
    vault key alone: vaultmem does not take that change, so an unsigned write
    is still refused and nothing is written; an operator's signed change
    turns it off."""
    team.set_policy(actor="ops", require_signatures=True)
    clock.advance(10)
    _forge_policy_change(team, vault_path, home, clock, SigningKey.generate() if signer == "stranger" else None)
    team.close()
    clock.advance(10)
    with Vault.open(vault_path, key=key, clock=clock) as vault:
        assert vault.policy.require_signatures is False  # what the branch says
        before = git_ok(vault_path, home, "for-each-ref")
        with pytest.raises(ToolError, match="require_signatures") as refused:
            VaultMemoryTool(vault, actor="bot").call(
                {"command": "create", "path": "/memories/u.md", "file_text": "x\n"}
            )
        assert "Nothing was changed" in str(refused.value.content)
        assert git_ok(vault_path, home, "for-each-ref") == before
        vault.sign_as("ops", keys["ops"])
        vault.set_policy(actor="ops", require_signatures=False)
        clock.advance(10)
        VaultMemoryTool(vault, actor="bot").call({"command": "create", "path": "/memories/u.md", "file_text": "x\n"})
        assert [(f.kind, f.detail.split(":")[0]) for f in vault.verify().findings] == [
            ("unsigned" if signer == "none" else "unknown signer", "policy branch")
        ]


def test_signed_policy_changes_of_a_signer_are_no_finding(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
) -> None:
    team.set_policy(actor="ops", require_signatures=True)
    clock.advance(10)
    team.sign_as("bot", keys["bot"])
    team.set_policy(actor="bot", secrets="refuse")
    clock.advance(10)
    team.set_policy(actor="ops", require_signatures=False)
    clock.advance(10)
    VaultMemoryTool(team, actor="later").call({"command": "create", "path": "/memories/a.md", "file_text": "x\n"})
    report = team.verify()
    assert report.findings == []


# -- vaultmem chat ----------------------------------------------------------------------


@pytest.mark.parametrize("given", ["--signing-key beside another key in the environment", "passphrase file"])
def test_chat_signs_with_the_key_its_command_line_gives(tmp_path: Path, given: str) -> None:
    """``vaultmem chat --signing-key`` wins over ``VAULTMEM_SIGNING_KEY``, as on
    every other command, and ``--signing-passphrase-file`` opens the key
    ``VAULTMEM_SIGNING_KEY`` names."""
    vault_path, key, git_home = tmp_path / "v.vault", generate_key(), tmp_path / "home"
    ops, bot = SigningKey.generate(), SigningKey.generate()
    ops.save(tmp_path / "ops.key")
    bot.save(tmp_path / "bot.key", passphrase="correct horse battery staple")
    passphrase = tmp_path / "bot.pass"
    passphrase.write_text("correct horse battery staple\n")
    passphrase.chmod(0o600)
    with Vault.init(vault_path, key=key) as vault:
        vault.sign_as("ops", ops)
        vault.add_signer("ops", ops.public, actor="ops", operator=True)
        vault.add_signer("bot", bot.public, actor="ops")
        vault.configure_signers()
    if given == "passphrase file":
        env_key, options = str(tmp_path / "bot.key"), ["--signing-passphrase-file", str(passphrase)]
    else:
        env_key = str(tmp_path / "ops.key")
        options = ["--signing-key", str(tmp_path / "bot.key"), "--signing-passphrase-file", str(passphrase)]
    script = [
        reply(tool_use("create", path="/memories/ada.md", file_text="Ada prefers e-mail.\n")),
        reply(text("Noted.")),
    ]
    with ReplayServer(script) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_", "GIT_"))}
        env.update(
            ANTHROPIC_API_KEY="test",
            ANTHROPIC_BASE_URL=server.url,
            VAULTMEM_KEY=key,
            VAULTMEM_SIGNING_KEY=env_key,
            HOME=str(git_home),
        )
        done = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat", "--actor", "bot", *options],
            input="Remember: Ada prefers e-mail.\n/exit\n",
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    shown = git_ok(vault_path, git_home, "log", "-1", "--format=%G? %GS %an %s", "main").strip()
    assert shown == "G bot bot memory: create /memories/ada.md", (shown, done.stdout)


# -- what docs/signing.md tells an auditor --------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_auditors_check_of_the_signers_branch_names_a_change_no_operator_signed(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
    home: Path,  # noqa: F811
    vault_path: Path,
    tmp_path: Path,
) -> None:
    """Someone with the vault key alone adds a signers change of their own,
    signed by their own key, whose allowed-signers file lists that key: git
    then calls every signature good.  The stock git check docs/signing.md
    gives an auditor must show that change's key, which is no operator's."""
    write(team, "bot", keys["bot"], "a.md")
    clock.advance(10)
    mallory = SigningKey.generate()
    forged_list = team.signers.add("mallory", mallory.public, now=int(clock()), by="mallory", operator=True)
    tip = git_ok(vault_path, home, "rev-parse", "vaultmem-signers").strip()
    tree = store_tree(vault_path, home, forged_list.files())
    body = edit(unsealed(raw_commit(vault_path, home, tip)), author="mallory", when=int(clock()), parent=tip, tree=tree)
    put(vault_path, home, forge(team, body, mallory), "vaultmem-signers")
    text = (DOCS / "signing.md").read_text()
    commands = re.findall(r"^git -C support\.vault .*vaultmem-signers.*$", text, flags=re.MULTILINE)
    check = [c for c in commands if "%GF" in c]
    assert check, "docs/signing.md gives no stock git command showing each signers change's key"
    shown = tmp_path / "audit"
    shown.mkdir()
    script = "\n".join(c.replace("support.vault", shlex.quote(str(vault_path))) for c in [commands[0], check[0]])
    done = subprocess.run(
        ["bash", "-c", script], cwd=shown, capture_output=True, text=True, env=clean_env(home), check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and mallory.public.fingerprint in lines[0], done.stdout
    assert all(keys["ops"].public.fingerprint in line for line in lines[1:]), done.stdout


# -- checkpoints ------------------------------------------------------------------------


def test_a_checkpoint_changed_after_signing_is_reported_in_one_plain_sentence(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
) -> None:
    write(team, "bot", keys["bot"], "a.md")
    clock.advance(10)
    kept = team.checkpoint(actor="ops").text
    changed = kept.replace("\ncommits 1\n", "\ncommits 40\n")
    assert changed != kept
    report = team.verify(checkpoints=[changed])
    assert [f.kind for f in report.findings] == ["bad signature"], report.problems
    detail = report.findings[0].detail
    assert "does not verify: the signature does not match what it signs" in detail
    assert "Error" not in detail, detail


# -- signer add, rotate, revoke --------------------------------------------------------


@pytest.mark.parametrize("command", ["add", "rotate", "revoke --key"])
@pytest.mark.parametrize("given", ["file", "text"])
def test_a_private_key_given_where_a_public_key_belongs_is_refused_without_showing_it(
    signed: Operator,  # noqa: F811
    command: str,
    given: str,
) -> None:
    """An operator who names the private key file, or pastes its text (say
    from ``VAULTMEM_SIGNING_KEY``), where ``signer add`` takes the public key:
    refused as such, and the private key is never printed."""
    private = (signed.home / "bot.key").read_text()
    secret_lines = [line for line in private.splitlines() if line and not line.startswith("-----")]
    key = "bot.key" if given == "file" else private
    words = command.split()
    argv = ["signer", words[0], "bot", *words[1:], key, "--actor", "ops", "--signing-key", "ops.key"]
    before = signed.rev("vaultmem-signers")
    err = signed.refused(*argv)
    assert "private key" in err and ".pub" in err, err
    assert not any(line in err for line in secret_lines), err
    assert "PRIVATE KEY-----" not in err, err
    assert signed.rev("vaultmem-signers") == before


def test_a_signing_keys_text_given_where_its_path_belongs_is_refused_without_showing_it(
    signed: Operator,  # noqa: F811
) -> None:
    """``--signing-key`` and ``signing_key=`` take the key file's path; the
    key's own text there (``--signing-key "$BOT_KEY"``) is refused, and the
    error never prints it."""
    private = (signed.home / "bot.key").read_text()
    secret_lines = [line for line in private.splitlines() if line and not line.startswith("-----")]
    call = '{"command": "create", "path": "/memories/a.md", "file_text": "a\\n"}'
    err = signed.refused("call", call, "--actor", "bot", "--signing-key", private)
    assert not any(line in err for line in secret_lines), err
    assert "PRIVATE KEY-----" not in err and "VAULTMEM_SIGNING_KEY" in err, err
    assert signed.count() == 0
    with Vault.open(signed.vault, key=signed.key) as vault, pytest.raises(BadKeyError) as raised:
        VaultMemoryTool(vault, actor="bot", signing_key=private)
    assert not any(line in str(raised.value) for line in secret_lines), raised.value


# -- signatures by keys of other types -------------------------------------------------


@pytest.mark.parametrize("key_type", ["rsa", "ecdsa"])
def test_a_commit_signed_by_a_key_of_another_type_is_an_unknown_signer(
    team: Vault,  # noqa: F811
    clock: FakeClock,
    keys: dict[str, SigningKey],  # noqa: F811
    home: Path,  # noqa: F811
    vault_path: Path,
    tmp_path: Path,
    key_type: str,
) -> None:
    """An attacker with the vault key signs a commit with stock ``ssh-keygen``
    and their own RSA or ECDSA key.  The signature is good, the key no
    signer's: stock git says so (``U``), and verify calls it what it is."""
    write(team, "bot", keys["bot"], "a.md")
    clock.advance(10)
    own = tmp_path / f"own_{key_type}"
    size = ["-b", "2048"] if key_type == "rsa" else []
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, *size, "-N", "", "-f", str(own)], check=True)
    tip = git_ok(vault_path, home, "rev-parse", "main").strip()
    sealed = seal(team, edit(unsealed(raw_commit(vault_path, home, tip)), parent=tip, when=int(clock())))
    payload = tmp_path / "payload"
    payload.write_bytes(sealed)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-n", "git", "-f", str(own), str(payload)], check=True)
    forged = put(vault_path, home, add_signature(sealed, (tmp_path / "payload.sig").read_bytes()))
    assert git_ok(vault_path, home, "log", "-1", "--format=%G?", forged).strip() == "U"
    assert stock_git(vault_path, home, "verify-commit", forged).returncode == 1
    report = team.verify()
    assert [(f.kind, f.version) for f in report.findings] == [("unknown signer", forged)], report.problems
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{own}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert fingerprint in report.findings[0].detail, report.findings[0].detail
    shown = team.signature_of(forged)  # what `vaultmem show` says of it
    assert shown is not None and (shown["ok"], shown["problem"], shown["key"]) == (False, "unknown signer", fingerprint)


def test_a_passphrase_from_the_environment_for_a_key_without_one_is_named_where_it_came_from(
    signed: Operator,  # noqa: F811
) -> None:
    """An operator keeps ``VAULTMEM_SIGNING_PASSPHRASE`` set for their own key
    and signs a write with a key that has none: the refusal says where the
    passphrase came from, since none was given on the command line."""
    call = '{"command": "create", "path": "/memories/a.md", "file_text": "a\\n"}'
    err = signed.refused(
        "call", call, "--actor", "bot", "--signing-key", "bot.key", VAULTMEM_SIGNING_PASSPHRASE="for-another-key"
    )
    assert "has no passphrase" in err and "VAULTMEM_SIGNING_PASSPHRASE" in err, err
    assert signed.count() == 0
