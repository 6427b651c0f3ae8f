"""Sharing a vault through git servers: what a refusal leaves behind, and
whether what it says is true.

A refused pull or push says "Nothing was changed"; an auditor's `git log
origin/main` and `git for-each-ref` must then see the vault as it was.  A
server is a bare repository given as a path, as users set one up on a shared
disk, with its own git settings and hooks; stock git is run beside vaultmem
to compare.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_sync import pushed, server, write

import vaultmem
from vaultmem import ConflictError, IntegrityError, Vault, VaultError, WrongKeyError, generate_key

SOURCE = str(Path(vaultmem.__file__).resolve().parents[1])


def cli(*args: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.update(VAULTMEM_KEY=key, PYTHONPATH=SOURCE)
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def every_ref(repo: Path) -> str:
    """Every ref of the repository, tracking refs included, and FETCH_HEAD."""
    head = repo / "FETCH_HEAD"
    fetched = head.read_text() if head.exists() else "(none)"
    return git(repo, "for-each-ref", "--format=%(objectname) %(refname)") + "FETCH_HEAD: " + fetched


def forge_on_server(remote: Path) -> str:
    """A commit made on the server without the vault's key, on top of its main."""
    tree = git(remote, "rev-parse", "main^{tree}").strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x"}
    env.update(GIT_COMMITTER_NAME="x", GIT_COMMITTER_EMAIL="x@x")
    forged = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", tree, "-p", "main", "-m", "forged"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    git(remote, "update-ref", "refs/heads/main", forged)
    return forged


def two_hosts(tmp_path: Path) -> tuple[Path, str, Vault, Vault]:
    remote, key, first = pushed(tmp_path)
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    return remote, key, first, second


# -- a refusal leaves the tracking refs as they were ---------------------------------------------


def test_a_refused_pull_leaves_the_tracking_refs_and_fetch_head_as_they_were(tmp_path: Path) -> None:
    """A commit made on the server without the key: pull and sync stop with
    "Nothing was changed", but refs/remotes/origin/main had moved to the
    forged commit (and FETCH_HEAD named it), which `git log origin/main`
    showed as the server's history.  Now every ref is as it was."""
    remote, key, _, second = two_hosts(tmp_path)
    second.close()
    forged = forge_on_server(remote)
    before = every_ref(second.path)
    for command in ("pull", "sync"):
        done = cli("--vault", str(second.path), command, key=key, cwd=tmp_path)
        assert done.returncode != 0 and "Nothing was changed" in done.stderr, done.stderr
        assert every_ref(second.path) == before
        assert forged not in every_ref(second.path)
    with Vault.open(second.path, key=key) as again, pytest.raises(IntegrityError, match="not made with"):
        again.pull()
    assert every_ref(second.path) == before


def test_a_refused_push_leaves_the_tracking_refs_as_they_were(tmp_path: Path) -> None:
    """A push refused because the server holds versions this vault lacks
    ("pull first. Nothing was pushed.") moved origin/main all the same, as
    `git push` never does when it is refused."""
    _, _, first, second = two_hosts(tmp_path)
    write(first, "b.txt", "two\n")
    first.push()
    write(second, "c.txt", "three\n")
    before = every_ref(second.path)
    with pytest.raises(ConflictError, match="pull first"):
        second.push()
    assert every_ref(second.path) == before
    assert second.pull().merge is not None  # the pull still brings it in


def test_a_history_cut_short_still_leaves_what_verify_reports_and_says_so(tmp_path: Path) -> None:
    """The one refusal that keeps what it fetched: verify reports a server
    whose history was cut short from it. Its message says so instead of
    "Nothing was changed"."""
    remote, _, first, second = two_hosts(tmp_path)
    write(first, "b.txt", "two\n")
    first.push()
    second.pull()
    git(remote, "update-ref", "refs/heads/main", "main~1")
    heads = git(second.path, "for-each-ref", "refs/heads")
    with pytest.raises(IntegrityError) as refused:
        second.pull()
    assert "Nothing was changed" not in str(refused.value)
    assert "This vault's branches were not changed; its refs/remotes/origin/ now record" in str(refused.value)
    assert git(second.path, "for-each-ref", "refs/heads") == heads
    assert any(finding.kind == "remote" for finding in second.verify().findings)


# -- a server without its keyring branch -----------------------------------------------------------


def test_a_pull_from_a_server_without_its_keyring_names_it_and_never_says_they_agree(tmp_path: Path) -> None:
    """The keyring branch deleted on the server (no key rotated since): a
    pull that moved nothing said "origin and this vault agree", and so did
    the pull half of a sync, while the server had no keyring. It now names
    the missing branch, in every pull's and sync's output."""
    remote, key, first, second = two_hosts(tmp_path)
    second.close()
    write(first, "b.txt", "two\n")
    first.push()
    git(remote, "update-ref", "-d", "refs/heads/vaultmem-keyring")
    done = cli("--vault", str(second.path), "pull", key=key, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("Pulled main: ")
    assert "origin has no vaultmem-keyring branch, which this vault holds" in done.stdout
    for command in ("pull", "sync"):
        done = cli("--vault", str(second.path), command, key=key, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "agree" not in done.stdout.split("Pushed")[0], done.stdout
        assert "origin has no vaultmem-keyring branch" in done.stdout, done.stdout
    assert "Pushed vaultmem-keyring: (new).." in done.stdout  # the sync put it back
    done = cli("--vault", str(second.path), "sync", key=key, cwd=tmp_path)
    assert done.stdout.splitlines() == [
        "Pulled: nothing to move; origin and this vault agree.",
        "Pushed: nothing to move; origin and this vault agree.",
    ]


def test_a_pull_that_finds_this_vault_ahead_does_not_say_they_agree(tmp_path: Path) -> None:
    _, key, _, second = two_hosts(tmp_path)
    write(second, "c.txt", "three\n")
    second.close()
    done = cli("--vault", str(second.path), "pull", key=key, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Pulled: nothing new on origin.",
        "This vault holds versions of main that origin lacks; the next push sends them.",
    ]


# -- a clone with the wrong key --------------------------------------------------------------------


def test_a_clone_with_the_wrong_key_says_nothing_was_made_and_makes_nothing(tmp_path: Path) -> None:
    """Every other refused clone says "cannot clone URL: ... Nothing was
    made."; a wrong key said only that the key did not open "this vault"."""
    remote, key, _, _ = two_hosts(tmp_path)
    before = sorted(os.listdir(tmp_path))
    done = cli("clone", str(remote), "deep/er/copy.vault", key=generate_key(), cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.splitlines() == [
        f"vaultmem: cannot clone {remote}: the VAULTMEM_KEY environment variable given does not open the vault. "
        "Nothing was made."
    ]
    assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(WrongKeyError) as refused:
        Vault.clone(str(remote), tmp_path / "copy.vault", key=generate_key())
    assert str(refused.value).startswith(f"Error: cannot clone {remote}: ")
    assert str(refused.value).endswith("Nothing was made.")
    assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(VaultError, match=r"not a passphrase\. Nothing was made\."):
        Vault.clone(str(remote), tmp_path / "copy.vault", passphrase="a long enough passphrase")
    assert sorted(os.listdir(tmp_path)) == before
    assert Vault.clone(str(remote), tmp_path / "copy.vault", key=key).head() is not None


# -- a push to a path honours the server's settings and hooks ------------------------------------


def erased(tmp_path: Path, remote: Path, key: str) -> Vault:
    """A vault on ``remote`` that then erased a file: its next push replaces the server's keyring."""
    vault = Vault.init(tmp_path / "eraser.vault", key=key)
    write(vault, "ada.md", "Ada's address\n")
    write(vault, "b.txt", "kept\n")
    vault.add_remote("origin", str(remote))
    vault.push()
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    return vault


def test_a_path_server_that_denies_forced_updates_is_not_forced(tmp_path: Path) -> None:
    """receive.denyNonFastForwards set on a bare repository given as a path:
    stock git's push of a keyring an erasure replaced is refused there, but
    vaultmem wrote the server's ref itself, forced. It is now refused the
    same way, before anything moves."""
    remote = server(tmp_path / "server.git")  # receive.denyNonFastForwards true
    vault = erased(tmp_path, remote, generate_key())
    before = git(remote, "for-each-ref")
    stock = subprocess.run(
        ["git", "-C", str(vault.path), "push", "--force", str(remote), "vaultmem-keyring"],
        capture_output=True,
        text=True,
    )
    assert stock.returncode != 0 and "non-fast-forward" in stock.stderr
    with pytest.raises(VaultError) as refused:
        vault.push()
    assert not isinstance(refused.value, ConflictError)
    assert "receive.denyNonFastForwards" in str(refused.value) and "Nothing was pushed." in str(refused.value)
    assert "let this remote accept a forced update of refs/heads/vaultmem-keyring" in str(refused.value)
    assert git(remote, "for-each-ref") == before
    git(remote, "config", "--unset", "receive.denyNonFastForwards")
    assert "vaultmem-keyring" in vault.push().moved


def install(remote: Path, hook: str, script: str, folder: str = "hooks") -> None:
    path = remote / folder / hook
    path.parent.mkdir(exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)


def test_a_push_to_a_path_runs_the_servers_receive_hooks(tmp_path: Path) -> None:
    """A vaultmem push to a path moved the server's branches itself and ran
    none of its hooks, where stock git's push to the same path runs them: a
    pre-receive hook that closes the server was passed by. The hooks now run
    as git's receive-pack runs them: a declining one stops the push with its
    words and nothing moves; post-receive hears of a push that landed."""
    remote, _, first, _ = two_hosts(tmp_path)
    install(remote, "pre-receive", "#!/bin/sh\ncat >/dev/null\necho 'pushes are closed today' >&2\nexit 1\n")
    write(first, "b.txt", "two\n")
    before = git(remote, "for-each-ref")
    with pytest.raises(VaultError) as refused:
        first.push()
    said = str(refused.value)
    assert not isinstance(refused.value, ConflictError)
    assert "a hook on the server declined it" in said and "pushes are closed today" in said
    assert "Nothing was pushed." in said and "pull first" not in said
    assert git(remote, "for-each-ref") == before  # no branch moved, no incoming ref left
    (remote / "hooks" / "pre-receive").unlink()
    log = tmp_path / "received.txt"
    install(remote, "post-receive", f"#!/bin/sh\ncat >> '{log}'\n")
    install(remote, "update", '#!/bin/sh\n[ "$1" = refs/heads/main ] && [ -n "$3" ]\n')
    moved = first.push().moved
    assert moved.keys() == {"main"}
    old, new = moved["main"]
    assert log.read_text() == f"{old} {new} refs/heads/main\n"


def test_a_hook_in_core_hooks_path_declines_a_push_to_a_path_too(tmp_path: Path) -> None:
    remote, _, first, _ = two_hosts(tmp_path)
    git(remote, "config", "core.hooksPath", "guard")
    install(remote, "update", '#!/bin/sh\necho "frozen: $1" >&2\nexit 1\n', folder="guard")
    write(first, "b.txt", "two\n")
    before = git(remote, "for-each-ref")
    with pytest.raises(VaultError, match=r"main: update hook declined; the server said: frozen: refs/heads/main"):
        first.push()
    assert git(remote, "for-each-ref") == before


def test_the_documented_update_hook_lets_an_erasure_through_on_a_path_server(tmp_path: Path) -> None:
    """docs/sync.md's update hook, on a path server without
    receive.denyNonFastForwards: the erasure's keyring passes it."""
    remote = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(remote)], check=True)
    text = (Path(__file__).resolve().parent.parent / "docs" / "sync.md").read_text(encoding="utf-8")
    start = text.index("```sh\n#!/bin/sh\n# hooks/update") + len("```sh\n")
    install(remote, "update", text[start : text.index("```", start)])
    key = generate_key()
    vault = erased(tmp_path, remote, key)
    assert vault.push().moved.keys() == {"main", "vaultmem-keyring"}
    with Vault.clone(str(remote), tmp_path / "copy.vault", key=key) as copy:
        assert copy.read("/memories/b.txt") == "kept\n"
        assert copy.verify().ok


def test_a_hook_a_path_push_cannot_run_is_refused(tmp_path: Path) -> None:
    remote, _, first, _ = two_hosts(tmp_path)
    install(remote, "reference-transaction", "#!/bin/sh\ncat >/dev/null\nexit 0\n")
    write(first, "b.txt", "two\n")
    before = git(remote, "for-each-ref")
    with pytest.raises(VaultError, match=r"has a reference-transaction hook.*Nothing was pushed\."):
        first.push()
    assert git(remote, "for-each-ref") == before


def test_a_push_to_a_path_stopped_after_the_keyring_moved_says_what_was_pushed(tmp_path: Path) -> None:
    """The keyring moves first, main last; when main moved on the server in
    between (another host's push; here a hook that moves it once), the push
    stopped with "pull first. Nothing was pushed." although the server's
    keyring had moved. It now names what was pushed before it stopped."""
    remote, _, first, second = two_hosts(tmp_path)
    write(second, "other.txt", "the other host's\n")
    git(second.path, "push", "-q", str(remote), "main:refs/pending/other")  # lands during the next push
    first.rotate_key(actor="operator")
    write(first, "c.txt", "three\n")
    once = '#!/bin/sh\ncat >/dev/null\nrm -- "$0"\ngit update-ref refs/heads/main pending/other\n'
    install(remote, "pre-receive", once)
    with pytest.raises(ConflictError) as refused:
        first.push()
    said = str(refused.value)
    assert "pull first" in said and "Nothing was pushed" not in said
    assert said.endswith("vaultmem-keyring was pushed before it stopped; nothing more was.")
    ring = git(first.path, "rev-parse", "vaultmem-keyring")
    assert git(remote, "rev-parse", "vaultmem-keyring") == ring
    assert first.pull().merge is not None
    assert first.push().moved.keys() == {"main"}
