"""Pulls that merge in the harder cases: tips with more than one merge base
(a criss-cross), a key change on both hosts, conflict copies at the path
limits, and two processes syncing one vault at once.  Real bare repositories
as servers, real keys, stock git to check what an auditor sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FakeClock, git

from vaultmem import ConflictError, Vault, VaultMemoryTool, WrongKeyError, generate_key
from vaultmem.errors import BusyError


def server(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "config", "receive.denyNonFastForwards", "true"], check=True)
    return path


class Host:
    """One clone, its clock, and the agent writing to it."""

    def __init__(self, vault: Vault, clock: FakeClock, name: str) -> None:
        self.vault, self.clock, self.name = vault, clock, name
        self.tool = VaultMemoryTool(vault, actor=name, session=f"{name}-session")

    def call(self, command: str, path: str, **params: str) -> None:
        self.clock.advance(1)
        self.tool.call({"command": command, "old_path" if command == "rename" else "path": path, **params})

    def files(self) -> dict[str, str]:
        return {e.path: self.vault.read(e.path) for e in self.vault.listing("/memories") if e.kind == "file"}

    def pull(self, remote: str) -> None:
        self.clock.advance(1)
        self.vault.pull(remote, actor=self.name)


@pytest.fixture
def crossed(tmp_path: Path) -> tuple[Host, Host]:
    """Two hosts sharing through two servers, ``origin`` and ``two``, with
    ``/memories/e.txt``, ``k.txt`` and ``status.md`` pushed to both."""
    key = generate_key()
    one, two = server(tmp_path / "one.git"), server(tmp_path / "two.git")
    a = Host(Vault.init(tmp_path / "a.vault", key=key, clock=(ca := FakeClock())), ca, "host-a")
    a.call("create", "/memories/e.txt", file_text="e\n")
    a.call("create", "/memories/k.txt", file_text="k\n")
    a.call("create", "/memories/status.md", file_text="open\n")
    a.vault.add_remote("origin", str(one))
    a.vault.add_remote("two", str(two))
    a.vault.push("origin")
    a.vault.push("two")
    cb = FakeClock(ca.now + 30)  # B writes later: its versions stay at the paths
    b = Host(Vault.clone(str(one), tmp_path / "b.vault", key=key, clock=cb), cb, "host-b")
    b.vault.add_remote("two", str(two))
    b.vault.pull("two")
    return a, b


def criss_cross(a: Host, b: Host) -> tuple[str, str]:
    """A pushes its tip to ``origin``, B to ``two``; each merges the other's:
    the two merges have the same two parents.  Returns both tips before."""
    a.vault.push("origin")
    b.vault.push("two")
    tips = str(a.vault.head()), str(b.vault.head())
    a.pull("two")
    b.pull("origin")
    assert a.files() == b.files()  # both hosts made the same merge
    return tips


# -- more than one merge base (a criss-cross) ---------------------------------------------


def test_a_deletion_after_a_criss_cross_stays_deleted(crossed: tuple[Host, Host]) -> None:
    a, b = crossed
    a.call("str_replace", "/memories/e.txt", old_str="e", new_str="e-A")
    b.call("delete", "/memories/e.txt")  # deleted against changed: both merges keep A's edit
    tips = criss_cross(a, b)
    assert b.files()["/memories/e.txt"] == "e-A\n"
    b.call("delete", "/memories/e.txt")  # acknowledged on B; A has not touched e.txt since
    a.vault.push("origin")
    b.pull("origin")
    assert sorted(git(b.vault.path, "merge-base", "--all", "main^1", "main^2").split()) == sorted(tips)
    assert b.files() == {"/memories/k.txt": "k\n", "/memories/status.md": "open\n"}
    b.vault.push("origin")
    a.pull("origin")
    assert a.files() == b.files()
    assert a.vault.verify().ok and b.vault.verify().ok


def test_a_conflict_copy_folded_back_after_a_criss_cross_stays_folded(crossed: tuple[Host, Host]) -> None:
    a, b = crossed
    a.call("str_replace", "/memories/status.md", old_str="open", new_str="closed by a")
    b.call("str_replace", "/memories/status.md", old_str="open", new_str="closed by b")
    a_tip, _ = criss_cross(a, b)
    copy = f"/memories/status.conflict-{a_tip[:8]}.md"
    assert b.files()[copy] == "closed by a\n"
    b.call("str_replace", "/memories/status.md", old_str="closed by b", new_str="closed by a and b")
    b.call("delete", copy)
    a.call("create", "/memories/later.txt", file_text="a wrote this after\n")
    a.vault.push("origin")
    b.pull("origin")
    assert b.files() == {
        "/memories/e.txt": "e\n",
        "/memories/k.txt": "k\n",
        "/memories/later.txt": "a wrote this after\n",
        "/memories/status.md": "closed by a and b\n",
    }


def test_writes_on_both_sides_after_a_criss_cross_are_all_kept(crossed: tuple[Host, Host]) -> None:
    """Nothing acknowledged is dropped: an edit of a file the other side
    deleted after the criss-cross stays, and edits since on both sides merge."""
    a, b = crossed
    a.call("str_replace", "/memories/e.txt", old_str="e", new_str="e-A")
    b.call("delete", "/memories/e.txt")
    a.call("create", "/memories/notes.md", file_text="one\n\ntwo\n\nthree\n")
    b.call("create", "/memories/notes.md", file_text="one\n\ntwo\n\nthree\n")
    criss_cross(a, b)
    a.call("str_replace", "/memories/e.txt", old_str="e-A", new_str="e-A again")
    a.call("str_replace", "/memories/notes.md", old_str="one", new_str="ONE")
    b.call("delete", "/memories/e.txt")
    b.call("str_replace", "/memories/notes.md", old_str="three", new_str="THREE")
    b.call("rename", "/memories/k.txt", new_path="/memories/kept/k.txt")
    a.call("str_replace", "/memories/k.txt", old_str="k", new_str="k-A")
    a.vault.push("origin")
    b.pull("origin")
    assert b.files() == {
        "/memories/e.txt": "e-A again\n",
        "/memories/kept/k.txt": "k-A\n",
        "/memories/notes.md": "ONE\n\ntwo\n\nTHREE\n",
        "/memories/status.md": "open\n",
    }


def test_three_merge_bases_merge_into_one_base(tmp_path: Path) -> None:
    """Three hosts write; two of them merge all three tips in different
    orders, so their tips have three merge bases.  A's later choices (a
    conflict resolved, a file deleted) are what B then holds, and the file
    only C changed keeps C's version."""
    key, clock = generate_key(), FakeClock()
    urls = {name: str(server(tmp_path / f"{name}.git")) for name in "abc"}
    a = Host(Vault.init(tmp_path / "a.vault", key=key, clock=clock), clock, "host-a")
    for name in ("e", "g", "s"):
        a.call("create", f"/memories/{name}.txt", file_text=f"{name}\n")
    for name, url in urls.items():
        a.vault.add_remote(name, url)
        a.vault.push(name)
    b = Host(Vault.clone(urls["b"], tmp_path / "b.vault", key=key, clock=clock), clock, "host-b")
    c = Host(Vault.clone(urls["c"], tmp_path / "c.vault", key=key, clock=clock), clock, "host-c")
    b.vault.add_remote("a", urls["a"])
    b.vault.add_remote("c", urls["c"])
    for host, name in ((a, "A"), (b, "B"), (c, "C")):
        host.call("str_replace", "/memories/s.txt", old_str="s", new_str=f"s-{name}")
    a.call("str_replace", "/memories/e.txt", old_str="e", new_str="e-A")
    c.call("str_replace", "/memories/g.txt", old_str="g", new_str="g-C")
    a.vault.push("a")
    b.vault.push("origin")
    c.vault.push("origin")
    for host, remotes in ((a, ("b", "c")), (b, ("c", "a"))):
        for remote in remotes:
            host.pull(remote)
    for path in a.files():
        if ".conflict-" in path:
            a.call("delete", path)
    a.call("str_replace", "/memories/s.txt", old_str=a.files()["/memories/s.txt"], new_str="s-A, s-B and s-C\n")
    a.call("delete", "/memories/e.txt")
    a.vault.push("a")
    b.pull("a")
    assert len(git(b.vault.path, "merge-base", "--all", "main^1", "main^2").split()) == 3
    assert b.files() == {"/memories/g.txt": "g-C\n", "/memories/s.txt": "s-A, s-B and s-C\n"}


def test_policy_changes_after_a_criss_cross_merge_without_a_false_conflict(crossed: tuple[Host, Host]) -> None:
    """The policy branch's merge bases after a criss-cross are both sides'
    first changes: merged against either one alone, each later change looks
    like a clash.  Merged against both (a virtual base), it is none."""
    a, b = crossed
    a.vault.set_policy(actor="ops-a", max_files=50)
    b.vault.set_policy(actor="ops-b", max_vault_bytes=4_000_000)
    a.vault.push("origin")
    b.vault.push("two")
    a.pull("two")  # both merge the other's change: the same policy, two merge commits
    b.pull("origin")
    assert a.vault.policy == b.vault.policy
    a.vault.set_policy(actor="ops-a", max_files=70)
    b.vault.set_policy(actor="ops-b", max_vault_bytes=5_000_000)
    a.vault.push("origin")
    b.pull("origin")
    bases = git(b.vault.path, "merge-base", "--all", "vaultmem-policy^1", "vaultmem-policy^2").split()
    assert len(bases) == 2
    assert (b.vault.policy.max_files, b.vault.policy.max_vault_bytes) == (70, 5_000_000)
    b.vault.push("origin")
    a.pull("origin")
    assert a.vault.policy == b.vault.policy
    assert a.vault.verify().ok and b.vault.verify().ok


def test_a_real_policy_clash_after_a_criss_cross_is_still_refused(crossed: tuple[Host, Host]) -> None:
    a, b = crossed
    a.vault.set_policy(actor="ops-a", max_files=50)
    b.vault.set_policy(actor="ops-b", max_vault_bytes=4_000_000)
    a.vault.push("origin")
    b.vault.push("two")
    a.pull("two")
    b.pull("origin")
    a.vault.set_policy(actor="ops-a", max_files=70)
    b.vault.set_policy(actor="ops-b", max_files=80)
    a.vault.push("origin")
    before = str(b.vault.head())
    with pytest.raises(ConflictError, match="max_files"):
        b.pull("origin")
    assert str(b.vault.head()) == before and b.vault.policy.max_files == 80


# -- a key change on both hosts -----------------------------------------------------------


def test_a_key_change_on_both_hosts_stops_the_pull_and_changes_nothing(tmp_path: Path) -> None:
    """docs/sync.md: a key change on both hosts at once cannot be merged.
    The pull given the other host's new key stops, this clone keeps its own
    key and branches, and once it takes the other host's key the pull merges."""
    key, k1, k2 = generate_key(), generate_key(), generate_key()
    remote = server(tmp_path / "server.git")
    a = Vault.init(tmp_path / "a.vault", key=key)
    VaultMemoryTool(a, actor="a").call({"command": "create", "path": "/memories/n.txt", "file_text": "one\n"})
    a.add_remote("origin", str(remote))
    a.push()
    c = Vault.clone(str(remote), tmp_path / "c.vault", key=key)
    a.change_key(key=k1)
    a.push()
    c.change_key(key=k2)
    VaultMemoryTool(c, actor="c").call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    before = git(c.path, "for-each-ref", "refs/heads")
    with pytest.raises(ConflictError, match="changed both here and on the remote 'origin'") as stopped:
        c.pull(key=k1)
    assert "Nothing was changed" in str(stopped.value)
    with pytest.raises(WrongKeyError):
        c.pull()  # with its own key, as before: the remote's keyring does not open
    assert git(c.path, "for-each-ref", "refs/heads") == before
    c.close()
    with pytest.raises(WrongKeyError):
        Vault.open(c.path, key=k1)
    c = Vault.open(c.path, key=k2)
    c.change_key(key=k1)  # the way out: take the other host's key here first
    assert "vaultmem-keyring" in c.pull(actor="c").moved
    c.push()
    a.pull()
    for vault in (a, c):
        assert vault.read("/memories/c.txt") == "c\n" and vault.verify().ok
    c.close()
    Vault.open(c.path, key=k1).close()


# -- two processes syncing one vault ------------------------------------------------------

PAUSED_PULL = """
import os, sys, time
from vaultmem import Vault
vault = Vault.open(sys.argv[1], key=sys.argv[2])
flag = sys.argv[3]
def progress(done, total):  # stops mid-transfer until the test says go
    if not os.path.exists(flag + ".paused"):
        open(flag + ".paused", "w").close()
        deadline = time.monotonic() + 20
        while not os.path.exists(flag + ".go") and time.monotonic() < deadline:
            time.sleep(0.01)
print(sorted(vault.pull(progress=progress, actor="first").moved), flush=True)
"""

PULLING = """
import json, sys, time
from vaultmem import Vault, VaultError
vault = Vault.open(sys.argv[1], key=sys.argv[2])
pulls, errors, deadline = 0, [], time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    try:
        vault.pull(actor="puller")
        pulls += 1
    except VaultError as err:
        errors.append(str(err))
print(json.dumps({"pulls": pulls, "errors": errors}), flush=True)
"""


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _wait_for(path: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


@pytest.fixture
def one_vault_two_syncs(tmp_path: Path) -> tuple[Path, str, Vault, Path]:
    """A server, another host that pushes to it, and a clone that two
    processes sync: (server, key, the other host's vault, the clone's path)."""
    key = generate_key()
    remote = server(tmp_path / "server.git")
    other = Vault.init(tmp_path / "other.vault", key=key)
    VaultMemoryTool(other, actor="o").call({"command": "create", "path": "/memories/s.txt", "file_text": "s\n"})
    other.add_remote("origin", str(remote))
    other.push()
    Vault.clone(str(remote), tmp_path / "shared.vault", key=key).close()
    return remote, key, other, tmp_path / "shared.vault"


def test_a_second_sync_of_one_vault_waits_for_the_first(
    one_vault_two_syncs: tuple[Path, str, Vault, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull in another process is stopped in the middle of its transfer; a
    pull here waits for it, then both succeed.  Past the bound it stops with
    an error that says why, and nothing changed."""
    from vaultmem.repo import syncing

    remote, key, other, shared = one_vault_two_syncs
    tool = VaultMemoryTool(other, actor="o")
    for round_ in ("waits", "bounded"):
        tool.call({"command": "create", "path": f"/memories/{round_}.txt", "file_text": f"{round_}\n"})
        other.push()
        flag = tmp_path / round_
        first = _python(PAUSED_PULL, str(shared), key, str(flag))
        _wait_for(Path(f"{flag}.paused"))
        outcome: dict[str, object] = {}

        def pull() -> None:
            with Vault.open(shared, key=key) as second:
                try:
                    outcome["moved"] = second.pull(actor="second").moved  # noqa: B023
                except BusyError as err:
                    outcome["error"] = str(err)  # noqa: B023
            outcome["at"] = time.monotonic()  # noqa: B023

        if round_ == "bounded":
            monkeypatch.setattr(syncing, "SYNC_WAIT", 0.3)
        before = git(shared, "for-each-ref")
        second = threading.Thread(target=pull)
        second.start()
        second.join(timeout=1.0 if round_ == "waits" else 10)
        if round_ == "waits":
            assert second.is_alive(), f"the second pull ran beside the first: {outcome}"
        else:
            assert "another sync of this vault" in str(outcome.get("error")), outcome
            assert git(shared, "for-each-ref") == before
        go = time.monotonic()
        Path(f"{flag}.go").touch()
        second.join(timeout=20)
        out, err = first.communicate(timeout=20)
        assert first.returncode == 0, err
        assert "main" in out
        if round_ == "waits":
            assert outcome["moved"] == {} and float(outcome["at"]) >= go  # type: ignore[arg-type]
    with Vault.open(shared, key=key) as vault:
        assert str(vault.head()) == git(remote, "rev-parse", "main").strip() and vault.verify().ok


def test_two_processes_pulling_one_vault_while_another_host_pushes_never_fail(
    one_vault_two_syncs: tuple[Path, str, Vault, Path],
) -> None:
    """An agent's automatic sync beside an operator's `vaultmem pull`: two
    processes pull one vault for two seconds while another host pushes
    (through git daemon, so that no push of a path server is involved)."""
    from test_sync import git_daemon

    remote, key, other, shared = one_vault_two_syncs
    with git_daemon(remote.parent) as base:
        other.remove_remote("origin")
        other.add_remote("origin", f"{base}/{remote.name}")
        pullers = [_python(PULLING, str(shared), key, "2") for _ in range(2)]
        tool, n = VaultMemoryTool(other, actor="o"), 0
        while any(p.poll() is None for p in pullers):
            tool.call({"command": "create", "path": f"/memories/o{n}.txt", "file_text": "o\n"})
            other.push()
            n += 1
        reports = []
        for puller in pullers:
            out, err = puller.communicate(timeout=20)
            assert puller.returncode == 0, err
            reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["errors"] for r in reports] == [[], []]
    assert all(r["pulls"] > 0 for r in reports) and n > 0
    with Vault.open(shared, key=key) as vault:
        vault.pull()
        assert str(vault.head()) == git(remote, "rev-parse", "main").strip() and vault.verify().ok


# -- a conflict at the path limits ----------------------------------------------------------


@pytest.mark.parametrize("name", ["report.md", "日本語のメモ.md"])
def test_a_conflict_on_a_path_at_the_length_limit_merges(tmp_path: Path, name: str) -> None:
    """Both versions of a file at a 1,024-byte path stay; the copy's path
    keeps to the limits (in the nearest folder with room), and the hosts
    agree after the merge is pushed and pulled."""
    folders = ["d" * 200] * 4
    rest = 1024 - len("/memories/") - 4 * 201 - len(name.encode()) - 1
    path = "/memories/" + "/".join([*folders, "e" * rest]) + "/" + name
    assert len(path.encode()) == 1024
    key, remote = generate_key(), server(tmp_path / "server.git")
    a = Host(Vault.init(tmp_path / "a.vault", key=key, clock=(ca := FakeClock())), ca, "host-a")
    a.call("create", path, file_text="status: open\n")
    a.vault.add_remote("origin", str(remote))
    a.vault.push()
    cb = FakeClock(ca.now + 30)
    b = Host(Vault.clone(str(remote), tmp_path / "b.vault", key=key, clock=cb), cb, "host-b")
    a.call("str_replace", path, old_str="open", new_str="closed")
    a.vault.push()
    b.call("str_replace", path, old_str="open", new_str="refunded")
    b.pull("origin")
    files = b.files()
    assert files.pop(path) == "status: refunded\n"
    [(copy, text)] = files.items()
    assert text == "status: closed\n" and len(copy.encode()) <= 1024 and ".conflict-" in copy
    assert copy.rpartition("/")[0] == path.rpartition("/")[0].rpartition("/")[0]  # one folder up
    b.vault.push()
    a.pull("origin")
    assert a.files() == b.files() and b.vault.verify().ok
