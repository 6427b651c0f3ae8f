"""Vault administration from the command line and the library: the signers
(who may still administer the vault after a change) and the remotes (what a
removal leaves in the vault's git config, read with stock git)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import FakeClock

from vaultmem import SigningKey, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli.app import main
from vaultmem.errors import BusyError


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def stock_git(gitdir: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(gitdir), *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(gitdir.parent), "GIT_CONFIG_NOSYSTEM": "1"},
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def signers_tip(vault_path: Path) -> str:
    return stock_git(vault_path, "rev-parse", "refs/heads/vaultmem-signers").strip()


# -- the last operator -------------------------------------------------------------------


def one_operator(vault_path: Path, clock: FakeClock) -> tuple[Vault, SigningKey]:
    alice = SigningKey.generate()
    vault = Vault.init(vault_path, key=generate_key(), clock=clock)
    vault.sign_as("ops-alice", alice)
    vault.add_signer("ops-alice", alice.public, actor="ops-alice", operator=True)
    vault.add_signer("support-bot", SigningKey.generate().public, actor="ops-alice")
    clock.advance(5)
    return vault, alice


@pytest.mark.parametrize("compromised", [False, True])
def test_the_last_operator_cannot_revoke_itself(tmp_path: Path, clock: FakeClock, compromised: bool) -> None:
    vault, _ = one_operator(tmp_path / "v", clock)
    before = (vault.signers, signers_tip(tmp_path / "v"))
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("ops-alice", actor="ops-alice", compromised=compromised)
    message = str(err.value)
    assert message.startswith("Error: 'ops-alice' holds the last operator key"), message
    assert "Nothing was changed" in message and "--operator" in message
    assert (vault.signers, signers_tip(tmp_path / "v")) == before
    # the operator still administers the vault
    vault.add_signer("bot-2", SigningKey.generate().public, actor="ops-alice")


def test_the_last_operator_key_of_several_of_one_principal(tmp_path: Path, clock: FakeClock) -> None:
    """An operator with a second key may revoke one of them, not both."""
    vault, alice = one_operator(tmp_path / "v", clock)
    second = SigningKey.generate()
    vault.add_signer("ops-alice", second.public, actor="ops-alice", operator=True)
    clock.advance(5)
    vault.revoke_signer("ops-alice", actor="ops-alice", key=alice.public)
    clock.advance(5)
    vault.sign_as("ops-alice", second)
    with pytest.raises(VaultError, match="holds the last operator key"):
        vault.revoke_signer("ops-alice", actor="ops-alice", key=second.public)


def test_with_a_second_operator_revoking_the_first_works(tmp_path: Path, clock: FakeClock) -> None:
    vault, _ = one_operator(tmp_path / "v", clock)
    bob = SigningKey.generate()
    vault.add_signer("ops-bob", bob.public, actor="ops-alice", operator=True)
    clock.advance(5)
    vault.revoke_signer("ops-alice", actor="ops-alice", compromised=True, reason="laptop stolen")
    vault.sign_as("ops-bob", bob)
    vault.add_signer("bot-2", SigningKey.generate().public, actor="ops-bob")
    assert [s.principal for s in vault.signers.entries if s.operator and not s.revoked] == ["ops-bob"]


def test_a_compromised_last_operator_key_is_rotated_then_revoked(tmp_path: Path, clock: FakeClock) -> None:
    """What the refusal advises for a leaked key works: rotate, then revoke the old key as compromised."""
    vault, alice = one_operator(tmp_path / "v", clock)
    fresh = SigningKey.generate()
    vault.rotate_signer("ops-alice", fresh.public, actor="ops-alice")
    clock.advance(5)
    vault.sign_as("ops-alice", fresh)
    vault.revoke_signer("ops-alice", actor="ops-alice", key=alice.public, compromised=True)
    assert [s.compromised for s in vault.signers.entries if s.principal == "ops-alice"] == [True, False]


def test_cli_revoking_the_last_operator_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    key = generate_key()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    Vault.init(tmp_path / "v", key=key).close()
    SigningKey.generate().save(tmp_path / "alice.key")
    base = ("--vault", str(tmp_path / "v"), "signer")
    signed = ("--actor", "ops-alice", "--signing-key", "alice.key")
    code, _, err = run(capsys, *base, "add", "ops-alice", "alice.key.pub", "--operator", *signed)
    assert code == 0, err
    tip = signers_tip(tmp_path / "v")
    code, out, err = run(capsys, *base, "revoke", "ops-alice", *signed)
    assert code == 2 and out == ""
    assert err.startswith("vaultmem: 'ops-alice' holds the last operator key of this vault"), err
    assert "vaultmem signer add NAME KEY.pub --operator" in err
    # docs/signing.md shows the refusal word for word
    assert err.rstrip("\n") in (Path(__file__).parent.parent / "docs" / "signing.md").read_text().splitlines()
    assert signers_tip(tmp_path / "v") == tip
    code, out, _ = run(capsys, *base, "list")
    assert code == 0 and out.split()[-1] == "valid"


# -- removing a remote ---------------------------------------------------------------------


def test_remote_remove_leaves_nothing_of_the_remote_in_the_git_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    vault_path, server = tmp_path / "v", tmp_path / "server.git"
    vault = Vault.init(vault_path, key=key)
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    config_before = (vault_path / "config").read_text()
    base = ("--vault", str(vault_path))
    assert run(capsys, *base, "remote", "add", "origin", str(server))[0] == 0
    assert run(capsys, *base, "remote", "add", "backup", str(server))[0] == 0
    vault.push("origin")  # also remembers what the server held
    vault.pull("origin")
    # what `git branch --set-upstream-to` writes: `git remote remove` drops it with the remote
    stock_git(vault_path, "config", "branch.main.remote", "origin")
    stock_git(vault_path, "config", "branch.main.merge", "refs/heads/main")
    code, out, err = run(capsys, *base, "remote", "remove", "origin")
    assert code == 0, err
    assert out == "Removed the remote origin; the server keeps its copy.\n"
    listed = stock_git(vault_path, "config", "--list", "--local")
    assert "remote.origin" not in listed
    assert "remote.backup.url=" in listed
    text = (vault_path / "config").read_text()
    assert "origin" not in text and "branch" not in text
    assert stock_git(vault_path, "remote").split() == ["backup"]
    assert "refs/remotes/origin" not in stock_git(vault_path, "for-each-ref")
    code, _, err = run(capsys, *base, "remote", "remove", "backup")
    assert code == 0, err
    assert (vault_path / "config").read_text() == config_before


def test_a_signer_that_is_not_an_operator_is_told_so_first(tmp_path: Path, clock: FakeClock) -> None:
    """Who may change the signers is judged before what the change would do:
    a signer that is no operator learns that, not what the list holds."""
    vault, _ = one_operator(tmp_path / "v", clock)
    bot = SigningKey.generate()
    vault.add_signer("bot-2", bot.public, actor="ops-alice")
    vault.sign_as("bot-2", bot)
    for attempt in (
        lambda: vault.revoke_signer("ops-alice", actor="bot-2"),
        lambda: vault.revoke_signer("nobody", actor="bot-2"),
    ):
        with pytest.raises(VaultError) as err:
            attempt()
        assert str(err.value) == "Error: 'bot-2' is not a valid operator of this vault's signers; nothing was changed."


def test_an_operator_signing_with_another_key_is_told_the_key_is_wrong(tmp_path: Path, clock: FakeClock) -> None:
    vault, _ = one_operator(tmp_path / "v", clock)
    stray = SigningKey.generate()
    vault.sign_as("ops-alice", stray)
    tip = signers_tip(tmp_path / "v")
    with pytest.raises(VaultError) as err:
        vault.add_signer("bot-2", SigningKey.generate().public, actor="ops-alice")
    assert str(err.value) == (
        f"Error: the signing key {stray.public.fingerprint} is not a valid operator key of 'ops-alice' "
        "(`vaultmem signer list` shows its keys); nothing was changed."
    )
    assert signers_tip(tmp_path / "v") == tip


def test_revoking_a_name_that_is_no_signer_says_so(tmp_path: Path, clock: FakeClock) -> None:
    vault, _ = one_operator(tmp_path / "v", clock)
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("nobody", actor="ops-alice")
    assert str(err.value) == (
        "Error: 'nobody' is no signer of this vault (`vaultmem signer list` shows them); nothing was changed."
    )


def test_revoking_a_key_of_someone_else_names_whose_it_is(tmp_path: Path, clock: FakeClock) -> None:
    """`--key` with a key that is not NAME's said NAME "has no unrevoked key", though it had one."""
    vault, alice = one_operator(tmp_path / "v", clock)
    tip = signers_tip(tmp_path / "v")
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("support-bot", actor="ops-alice", key=alice.public)
    assert str(err.value) == (
        f"Error: key {alice.public.fingerprint} is not a key of 'support-bot' but of 'ops-alice'; nothing was changed."
    )
    unknown = SigningKey.generate().public
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("support-bot", actor="ops-alice", key=unknown)
    assert str(err.value) == f"Error: key {unknown.fingerprint} is not a key of 'support-bot'; nothing was changed."
    assert signers_tip(tmp_path / "v") == tip
    assert all(s.revoked is None for s in vault.signers.entries)


@pytest.mark.parametrize("name", ["örigin", "２", "backup\u00b2"])
def test_a_remote_name_that_is_not_ascii_is_refused_and_nothing_is_stored(tmp_path: Path, name: str) -> None:
    """Such a name was stored, though the message asks for letters and digits
    and the policy's sync_remote can never name it."""
    vault = Vault.init(tmp_path / "v", key=generate_key())
    before = (tmp_path / "v" / "config").read_text()
    with pytest.raises(VaultError) as err:
        vault.add_remote(name, str(tmp_path / "server.git"))
    assert str(err.value) == f"Error: {name!r} is not a remote name: use ASCII letters, digits, '-', '_' and '.'."
    assert vault.remotes == [] and (tmp_path / "v" / "config").read_text() == before


@pytest.mark.parametrize("url", ["ssh://", "http://", "https:///support.vault", "git://:9418/x", "   "])
def test_a_remote_url_that_names_no_server_is_refused_and_nothing_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """Such a URL was stored (a blank one as the folder the command ran in,
    plus a space), and every push and pull through it failed later."""
    key = generate_key()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    monkeypatch.chdir(tmp_path)
    Vault.init(tmp_path / "v", key=key).close()
    before = (tmp_path / "v" / "config").read_text()
    code, out, err = run(capsys, "--vault", str(tmp_path / "v"), "remote", "add", "origin", "--", url)
    assert code == 2 and out == ""
    if url.strip():
        scheme = url.split(":")[0]
        assert err == (
            f"vaultmem: the remote's URL names no server: one starting {scheme}:// needs a host, such as "
            f"{scheme}://git.example.com/support.vault. Nothing was stored.\n"
        )
    else:
        assert err == "vaultmem: the remote's URL is empty or holds a control character.\n"
    assert (tmp_path / "v" / "config").read_text() == before
    assert stock_git(tmp_path / "v", "remote") == ""


def test_revoking_one_key_already_revoked_names_that_key(tmp_path: Path, clock: FakeClock) -> None:
    """It said the signer "has no unrevoked key to revoke", though its other key was valid."""
    vault, _ = one_operator(tmp_path / "v", clock)
    old, new = SigningKey.generate(), SigningKey.generate()
    vault.add_signer("bot-2", old.public, actor="ops-alice")
    vault.add_signer("bot-2", new.public, actor="ops-alice")
    clock.advance(5)
    vault.revoke_signer("bot-2", actor="ops-alice", key=old.public)
    clock.advance(5)
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("bot-2", actor="ops-alice", key=old.public)
    assert str(err.value) == f"Error: key {old.public.fingerprint} of 'bot-2' is already revoked; nothing was changed."
    vault.revoke_signer("bot-2", actor="ops-alice", key=old.public, compromised=True)  # a leak found later
    with pytest.raises(VaultError) as err:
        vault.revoke_signer("bot-2", actor="ops-alice", key=old.public, compromised=True)
    assert str(err.value) == (
        f"Error: key {old.public.fingerprint} of 'bot-2' is already revoked as compromised; nothing was changed."
    )
    assert [s.revoked is None for s in vault.signers.entries if s.principal == "bot-2"] == [False, True]


def test_remote_remove_waits_for_a_running_pull(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote removed while a pull ran came back half: the pull, ending
    after the removal, wrote the remote's tracking refs and its witness
    (remote.origin.vaultmemwitness) back, and `git remote` listed an origin
    with no URL, whose witness a remote added again under that name
    inherited.  The removal now takes the vault's sync lock, as a pull does:
    told not to wait, it is refused while the pull runs, and changes nothing."""
    from vaultmem.repo import syncing

    key = generate_key()
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    vault = Vault.init(tmp_path / "v", key=key)
    vault.add_remote("origin", str(server))
    VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    vault.push("origin")
    other = Vault.clone(str(server), tmp_path / "other", key=key)
    VaultMemoryTool(other, actor="b").call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    other.push("origin")

    monkeypatch.setattr(syncing, "SYNC_WAIT", 0.0)
    second = Vault.open(tmp_path / "v", key=key)  # another process's handle, as `vaultmem remote remove` has
    refused: list[str] = []

    def progress(done: int, total: int) -> None:
        if not refused:  # the pull is fetching now
            with pytest.raises(BusyError) as err:
                second.remove_remote("origin")
            refused.append(str(err.value))

    vault.pull("origin", progress)
    assert refused and "another sync of this vault (a pull or a push) is still running" in refused[0]
    assert stock_git(tmp_path / "v", "remote", "-v").split() == [
        "origin",
        str(server),
        "(fetch)",
        "origin",
        str(server),
        "(push)",
    ]
    second.remove_remote("origin")
    assert stock_git(tmp_path / "v", "remote") == ""
    assert "origin" not in (tmp_path / "v" / "config").read_text()
    assert "refs/remotes/" not in stock_git(tmp_path / "v", "for-each-ref")


@pytest.mark.parametrize("window", [{"valid_after": 1_900_000_000}, {"valid_after": 1, "valid_before": 1_000}])
def test_a_first_operator_whose_window_misses_now_is_told_so(
    tmp_path: Path, clock: FakeClock, window: dict[str, int]
) -> None:
    """It was told "the first signer must be an operator adding their own
    key", which is what it was doing; the window was the trouble."""
    alice = SigningKey.generate()
    vault = Vault.init(tmp_path / "v", key=generate_key(), clock=clock)
    vault.sign_as("ops-alice", alice)
    with pytest.raises(VaultError) as err:
        vault.add_signer("ops-alice", alice.public, actor="ops-alice", operator=True, **window)
    assert str(err.value) == (
        "Error: the first operator's key signs this very change, so it must be valid now: give a "
        "--valid-after/--valid-before window that holds now (or neither); nothing was changed."
    )
    assert not vault.has_signers()


def test_a_remote_added_again_does_not_inherit_a_left_over_witness(tmp_path: Path) -> None:
    """A witness left in the config for a name that has no remote (a sync that
    ended after the remote's removal left one) made the remote added again
    under that name fail every pull: "its history was rewritten or cut short"."""
    key = generate_key()
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    first = Vault.init(tmp_path / "first", key=key)
    first.add_remote("origin", str(server))
    VaultMemoryTool(first, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    first.push("origin")
    vault = Vault.clone(str(server), tmp_path / "v", key=key)
    vault.remove_remote("origin")
    stock_git(tmp_path / "v", "config", "remote.origin.vaultmemwitness", "e9c83e2072d79c9f1605cf5edac19827105bd2e6")
    assert vault.remotes == []
    vault.add_remote("origin", str(server))
    assert "vaultmemwitness" not in stock_git(tmp_path / "v", "config", "--list", "--local")
    assert vault.pull("origin").moved == {}


def test_a_remote_name_too_long_for_a_file_name_is_refused(tmp_path: Path) -> None:
    """A 300-character name was stored, and every pull through it then failed
    ("cannot reach the remote"): its tracking refs are files named after it."""
    vault = Vault.init(tmp_path / "v", key=generate_key())
    before = (tmp_path / "v" / "config").read_text()
    with pytest.raises(VaultError) as err:
        vault.add_remote("r" * 300, str(tmp_path / "server.git"))
    assert str(err.value) == "Error: a remote name is at most 100 characters; this one has 300."
    assert (tmp_path / "v" / "config").read_text() == before
    assert vault.add_remote("r" * 100, str(tmp_path / "server.git")).name == "r" * 100
