"""Signed commits as operators and auditors meet them (second hunt): key
windows at their exact ends, judged alike by vaultmem and stock git;
tampered signatures that stock git refuses; what verify says of a key
revoked as compromised; and signer states shown as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
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
    store_tree,
    unsealed,
    verify_commit,
)
from test_signing_cli import Operator, op, signed  # noqa: F401 (fixtures)
from test_signing_sync import Site, site  # noqa: F401 (fixture)
from test_signing_sync import write as sync_write

from vaultmem import SigningKey, Vault, VaultMemoryTool
from vaultmem.core.signers import show_time


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("ops", "bot")}


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


def head(vault_path: Path, home: Path) -> str:
    return git_ok(vault_path, home, "rev-parse", "main").strip()


def test_a_keys_window_ends_are_judged_alike_by_vaultmem_and_stock_git(
    vault: Vault, vault_path: Path, clock: FakeClock, keys: dict[str, SigningKey], home: Path
) -> None:
    start = int(clock())
    vault.sign_as("ops", keys["ops"])
    vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
    vault.add_signer("bot", keys["bot"].public, actor="ops", valid_after=start + 100, valid_before=start + 200)
    vault.configure_signers()
    accepted = []
    for offset, ok in ((99, False), (100, True), (150.9, True), (200, True), (201, False)):
        clock.now = start + offset
        if ok:
            write(vault, "bot", keys["bot"], f"at-{offset}")
            accepted.append(head(vault_path, home))
        else:
            with pytest.raises(Exception, match="outside its validity now"):
                write(vault, "bot", keys["bot"], f"at-{offset}")
    report = vault.verify()
    assert (report.signed, report.findings) == (3, [])
    for commit in accepted:
        assert verify_commit(vault_path, home, commit).returncode == 0, commit


# -- a signature re-wrapped with stock tools: good to vaultmem only where good to git -------------------

REWRAPPED = {
    # ssh-keygen (which git runs) takes the header line only exactly as it is written
    "line ends of CR LF": (lambda sig: sig.replace(b"\n", b"\r\n"), False),
    "a space after the header": (lambda sig: sig.replace(b"SIGNATURE-----\n", b"SIGNATURE----- \n", 1), False),
    "the header indented": (lambda sig: b"  " + sig, False),
    # and reads the base64 between header and footer whatever its white space
    "spaces inside the base64": (lambda sig: _spaced(sig), True),
}


def _spaced(armored: bytes) -> bytes:
    lines = armored.split(b"\n")
    lines[1] = lines[1][:20] + b" \t " + lines[1][20:] + b"  "
    return b"\n".join(lines)


@pytest.mark.parametrize("how", sorted(REWRAPPED))
def test_a_signature_rewrapped_with_stock_tools_is_judged_as_stock_git_judges_it(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], how: str
) -> None:
    """Someone re-wraps a signed commit's signature (a CR LF conversion, a
    stray space) and moves main onto it: the signature bytes are still bot's,
    but where ssh-keygen cannot read the armor, stock git rejects the commit,
    and vaultmem verify must not call it good."""
    write(team, "bot", keys["bot"], "one.txt")
    clock.advance(30)
    write(team, "bot", keys["bot"], "two.txt")
    body = unsealed(raw_commit(vault_path, home, "main"))
    rewrap, good = REWRAPPED[how]
    armored = keys["bot"].sign(seal(team, body))
    forged = put(vault_path, home, add_signature(seal(team, body), rewrap(armored)))
    assert (verify_commit(vault_path, home, forged).returncode == 0) is good

    report = team.verify()
    findings = [(f.kind, f.version) for f in report.findings]
    assert findings == ([] if good else [("bad signature", forged)]), report.findings
    assert report.signed == (2 if good else 1)


# -- what verify and signer list say ------------------------------------------------------------------


def test_verify_says_a_key_revoked_as_compromised_was_not_revoked_before_the_commits_it_signed(
    team: Vault, clock: FakeClock, keys: dict[str, SigningKey]
) -> None:
    """bot writes, then its key leaks and is revoked as compromised a day
    later: every commit it signed is a finding, and the finding must not
    tell the auditor that the key was revoked before those commits (it was
    not; it is revoked for every time)."""
    write(team, "bot", keys["bot"], "one.txt")
    written = int(clock())
    clock.advance(86400)
    team.revoke_signer("bot", actor="ops", compromised=True, reason="laptop stolen")
    [finding] = [f for f in team.verify().findings if f.kind == "revoked"]
    assert "revoked before" not in finding.detail
    assert "revoked as compromised" in finding.detail, finding.detail
    assert show_time(written) in finding.detail


def test_signer_list_shows_a_key_whose_window_has_not_begun_as_not_yet_valid(signed: Operator) -> None:  # noqa: F811
    """An operator adds a key that signs from tomorrow on: signer list must
    not call it expired (it has not begun), and its JSON says it is not valid now."""
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    signed.ok("signer", "new", "night-bot", **env)
    tomorrow = datetime.fromtimestamp(time.time() + 86400, tz=timezone.utc).isoformat()
    signed.ok(
        "signer", "add", "night-bot", "night-bot.key.pub", "--valid-after", tomorrow,
        "--actor", "ops", "--signing-key", "ops.key", **env,
    )  # fmt: skip
    listed = signed.ok("signer", "list", **env).splitlines()
    [line] = [row for row in listed if row.startswith("night-bot ")]
    assert line.endswith("not yet valid"), line
    assert "expired" not in line
    [entry] = [e for e in signed.json("signer", "list", **env)["signers"] if e["principal"] == "night-bot"]
    assert entry["valid_now"] is False


# -- git's files after the vault was copied or moved ------------------------------------------------


def test_a_revocation_in_a_copied_vault_reaches_the_copys_own_stock_git(
    team: Vault, vault_path: Path, tmp_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], key: str
) -> None:
    """An operator copies the vault (a backup, a second machine: `cp -a`),
    and revokes bot's leaked key as compromised in the copy. The copy's git
    config still names the first vault's allowed-signers file, so stock git
    in the copy judged bot's commits by signers the copy no longer has, and
    went on calling them good."""
    write(team, "bot", keys["bot"], "one.txt")
    bots = head(vault_path, home)
    copy = tmp_path / "copy.vault"
    shutil.copytree(vault_path, copy, symlinks=True)
    clock.advance(60)
    with Vault.open(copy, key=key, clock=clock) as copied:
        copied.sign_as("ops", keys["ops"])
        copied.revoke_signer("bot", actor="ops", compromised=True, reason="leaked")
    assert verify_commit(copy, home, bots).returncode != 0  # the copy's git no longer takes bot's key
    assert git_ok(copy, home, "config", "gpg.ssh.allowedSignersFile").strip() == str(
        copy.resolve() / "vaultmem" / "allowed_signers"
    )
    assert verify_commit(vault_path, home, bots).returncode == 0  # the first vault is its own


def test_a_moved_vault_points_stock_git_at_its_own_files_at_its_first_signed_write(
    team: Vault, vault_path: Path, tmp_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], key: str
) -> None:
    """The vault folder is renamed after `git-setup`: stock git found no
    allowed-signers file at the old path, and no signed write or signer
    change ever told it the new one."""
    moved = tmp_path / "moved.vault"
    os.rename(vault_path, moved)
    with Vault.open(moved, key=key, clock=clock) as vault:
        write(vault, "bot", keys["bot"], "one.txt")
        commit = head(moved, home)
    assert verify_commit(moved, home, commit).returncode == 0, verify_commit(moved, home, commit).stderr


def test_show_of_a_version_whose_signature_names_no_key_says_so_in_words(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], key: str
) -> None:
    """A commit whose gpgsig header was replaced by text that is no SSH
    signature: `vaultmem show` printed `key None` (a Python value) to the auditor."""
    write(team, "bot", keys["bot"], "one.txt")
    clock.advance(30)
    write(team, "bot", keys["bot"], "two.txt")
    body = unsealed(raw_commit(vault_path, home, "main"))
    put(vault_path, home, add_signature(seal(team, body), b"not a signature at all\n"))
    env = {**clean_env(home), "VAULTMEM_KEY": key, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    shown = subprocess.run(
        [sys.executable, "-m", "vaultmem", "show", "main", "--vault", str(vault_path)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    [line] = [row for row in shown.stdout.splitlines() if row.startswith("signed by")]
    assert "None" not in line
    assert line.endswith("(bad signature)"), line


# -- a signers list someone with the vault key alone wrote -------------------------------------------


@pytest.mark.parametrize("listed", ["not json", "a time of 1e400"])
def test_verify_reports_a_sealed_signers_list_it_cannot_read_rather_than_stopping(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey], listed: str
) -> None:
    """An agent that holds the vault key (not an operator's) commits, with
    stock git, a signers.json that is no list: `vaultmem verify` stopped at it
    ("the vault's signers list is not readable JSON", or "unexpected
    OverflowError") and checked nothing, where it must report it as a finding."""
    write(team, "bot", keys["bot"], "one.txt")
    data = (
        b"not json"
        if listed == "not json"
        else b'{"format": 1, "signers": [{"principal": "ops", "key": "%s", "operator": true, "valid_after": 1e400}]}'
        % keys["ops"].public.line.encode()
    )
    tree = store_tree(vault_path, home, [("allowed_signers", b""), ("revoked_keys", b""), ("signers.json", data)])
    tip = git_ok(vault_path, home, "rev-parse", "vaultmem-signers").strip()
    body = unsealed(raw_commit(vault_path, home, "vaultmem-signers"))
    forged = put(vault_path, home, forge(team, edit(body, parent=tip, tree=tree), None), "vaultmem-signers")

    report = team.verify()
    assert ("object", forged) in [(f.kind, f.version) for f in report.findings], report.findings
    with pytest.raises(Exception, match="vaultmem-signers back to its last good commit"):
        write(team, "bot", keys["bot"], "two.txt")  # nothing is signed against a list that cannot be read


# -- the public key given where the private one is asked for -----------------------------------------


@pytest.mark.parametrize("given", ["--signing-key bot.key.pub", "VAULTMEM_SIGNING_KEY=<the .pub line>"])
def test_a_public_key_given_as_the_signing_key_is_named_as_such(signed: Operator, given: str) -> None:  # noqa: F811
    """An agent's operator gives bot.key.pub (the file `signer add` took)
    as its signing key: vaultmem said to `chmod 600` it (then, once done,
    that it is "not an OpenSSH private key"), or, given as the key itself,
    "No such file or directory"; it must say that this is the public key."""
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if given.startswith("--"):
        done = signed.write("one.txt", "--actor", "bot", "--signing-key", "bot.key.pub", **env)
    else:
        line = (signed.home / "bot.key.pub").read_text()
        done = signed.write("one.txt", "--actor", "bot", VAULTMEM_SIGNING_KEY=line, **env)
    assert done.returncode != 0
    assert "is a public key" in done.stderr and "without .pub" in done.stderr, done.stderr
    assert "chmod" not in done.stderr and "No such file" not in done.stderr
    assert "Traceback" not in done.stderr


# -- a checkpoint file emptied -------------------------------------------------------------------------


def test_verify_against_an_emptied_checkpoint_file_is_a_finding(
    team: Vault, vault_path: Path, home: Path, clock: FakeClock, keys: dict[str, SigningKey]
) -> None:
    """The operator keeps `checkpoint --out` outside the vault; whoever moved
    main back also emptied that file: `verify --checkpoint FILE` said "no
    problems found", as if the file had proved main whole."""
    team.sign_as("ops", keys["ops"])
    for name in ("one.txt", "two.txt"):
        write(team, "bot", keys["bot"], name)
        clock.advance(10)
    kept = team.checkpoint(actor="ops").text
    assert [f.kind for f in team.verify(checkpoints=[kept]).findings] == []
    for emptied in ("", "\n\n"):
        findings = [(f.kind, f.detail) for f in team.verify(checkpoints=[emptied]).findings]
        assert findings and all(kind == "checkpoint" for kind, _ in findings), findings
        assert "empty" in findings[0][1]


# -- a checkpoints list on the server that cannot be read ---------------------------------------------


def test_a_pull_merges_past_a_checkpoints_list_on_the_server_that_cannot_be_read(
    site: Site,  # noqa: F811
    tmp_path: Path,
    home: Path,
) -> None:
    """Someone with the vault key alone pushes a vaultmem-checkpoints commit
    whose list is garbage: every pull of a clone with checkpoints of its own
    failed with "the file holds no vaultmem checkpoint" (no file was given),
    for good. The pull now keeps every checkpoint it can read; verify names
    the server's branch as the one holding none."""
    first = site.first
    first.checkpoint(actor="ops")
    first.push()
    second = site.clone(tmp_path / "second.vault")
    tip = git_ok(second.path, home, "rev-parse", "vaultmem-checkpoints").strip()
    body = unsealed(raw_commit(second.path, home, "vaultmem-checkpoints"))
    tree = store_tree(second.path, home, [("checkpoints", b"garbage\n")])
    put(second.path, home, forge(second, edit(body, parent=tip, tree=tree), None), "vaultmem-checkpoints")
    second.push()

    site.clock.advance(5)
    sync_write(first, "b.txt", "b\n", "ops", site.ops)
    mine = [first.checkpoint(actor="ops").text]
    first.pull(actor="ops")  # refused before, with "the file holds no vaultmem checkpoint"
    kept = git_ok(first.path, home, "show", "vaultmem-checkpoints:checkpoints")
    assert mine[0] in kept and kept.count("vaultmem checkpoint 1\n") == 2
    details = [f.detail for f in first.verify().findings]
    assert details == ["origin's vaultmem-checkpoints branch holds no vaultmem checkpoint."], details
    first.push()
    first.pull(actor="ops")
    assert first.verify().ok
