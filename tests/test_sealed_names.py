"""Sealed names (docs/erasure.md "Sealed names"): trees, subjects and trailers
hold opaque tokens; the real names live inside each version's encrypted
payload, are shown to key holders, and are erased with the content."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from tests.conftest import FakeClock, git
from tests.test_erasure import all_objects, assert_no_key_left, every_file_bytes, inflated
from tests.test_migrate import MIGRATE_AND_DIE
from vaultmem import Vault, VaultMemoryTool
from vaultmem.core.names import MARKER, TOKEN_LENGTH, Names, is_token
from vaultmem.errors import ErasedError, VaultError

TOKEN = re.compile(rf"n[a-z2-7]{{{TOKEN_LENGTH}}}")
NAMES = ("customers", "ada_lovelace.xml", "grace_hopper.xml", "clients", "notes.md", "preferences")
EMAIL = "ada.lovelace@example.com"


def write(vault: Vault, **call: object) -> str:
    return VaultMemoryTool(vault, actor="support-bot").call(call)


def story(vault: Vault) -> None:
    write(vault, command="create", path="/memories/customers/ada_lovelace.xml", file_text=f"<email>{EMAIL}</email>\n")
    write(vault, command="create", path="/memories/customers/grace_hopper.xml", file_text="<plan>pro</plan>\n")
    write(vault, command="create", path="/memories/notes.md", file_text="call back\n")
    write(vault, command="str_replace", path="/memories/notes.md", old_str="call", new_str="ring")
    write(vault, command="rename", old_path="/memories/customers", new_path="/memories/clients")
    write(vault, command="insert", path="/memories/clients/ada_lovelace.xml", insert_line=1, insert_text="<vip/>")
    write(vault, command="create", path="/memories/preferences/tone.md", file_text="brief\n")
    write(vault, command="delete", path="/memories/preferences")


@pytest.fixture
def sealed(tmp_path: Path, key: str, clock: FakeClock) -> Vault:
    vault = Vault.init(tmp_path / "sealed.vault", key=key, clock=clock, sealed_names=True)
    story(vault)
    return vault


def plain_everywhere(folder: Path) -> bytes:
    """Every byte under the vault folder, with every zlib stream inflated, and every object."""
    pieces = [all_objects(folder)]
    for _name, data in every_file_bytes(folder):
        pieces.extend(inflated(data))
    return b"\n".join(pieces)


def fsck(folder: Path) -> None:
    """Stock git finds nothing wrong (dangling objects of a killed process are no fault)."""
    subprocess.run(["git", "-C", str(folder), "fsck", "--strict"], check=True, capture_output=True)


def tree_names(folder: Path, rev: str = "main") -> list[str]:
    return [n for n in git(folder, "ls-tree", "-r", "-z", "--name-only", rev).split("\0") if n]


def test_the_tool_answers_exactly_as_in_a_vault_with_plain_names(tmp_path: Path, key: str) -> None:
    calls: list[dict[str, object]] = [
        {"command": "create", "path": "/memories/b/zeta.md", "file_text": "z\n"},
        {"command": "create", "path": "/memories/b/alpha.md", "file_text": "a\nb\n"},
        {"command": "create", "path": "/memories/.hidden/x.md", "file_text": "h\n"},
        {"command": "create", "path": "/memories/a.md", "file_text": "top\n"},
        {"command": "view", "path": "/memories"},
        {"command": "view", "path": "/memories/b/alpha.md", "view_range": [2, 2]},
        {"command": "str_replace", "path": "/memories/b/alpha.md", "old_str": "b", "new_str": "c"},
        {"command": "insert", "path": "/memories/a.md", "insert_line": 0, "insert_text": "first"},
        {"command": "rename", "old_path": "/memories/b", "new_path": "/memories/c/d"},
        {"command": "view", "path": "/memories"},
        {"command": "create", "path": "/memories/c/d/alpha.md", "file_text": "again"},
        {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/c/d/zeta.md"},
        {"command": "view", "path": "/memories/missing.md"},
        {"command": "create", "path": "/memories/a.md/x", "file_text": "under a file"},
        {"command": "delete", "path": "/memories/c"},
        {"command": "view", "path": "/memories"},
        # a name in the form of a token is a name like any other
        {"command": "create", "path": f"/memories/{'n' + 'a' * TOKEN_LENGTH}/x.md", "file_text": "t\n"},
        {"command": "view", "path": f"/memories/{'n' + 'a' * TOKEN_LENGTH}"},
        {"command": "create", "path": f"/memories/{'n' + 'a' * TOKEN_LENGTH}", "file_text": "clash"},
        {"command": "rename", "old_path": f"/memories/{'n' + 'a' * TOKEN_LENGTH}", "new_path": "/memories/t"},
        {"command": "view", "path": "/memories"},
    ]
    answers = []
    for sealed in (False, True):
        vault = Vault.init(tmp_path / f"v{sealed}", key=key, sealed_names=sealed)
        tool = VaultMemoryTool(vault, actor="a")
        said = []
        for call in calls:
            try:
                said.append(tool.call(call))
            except Exception as err:  # the tool's errors are part of the contract
                said.append(f"{type(err).__name__}: {err}")
        answers.append(said)
        assert vault.verify().ok
    assert answers[0] == answers[1]


def test_no_name_is_stored_in_plain_anywhere(sealed: Vault, tmp_path: Path) -> None:
    folder = tmp_path / "sealed.vault"
    names = tree_names(folder)
    assert MARKER.decode() in names
    for name in names:
        parts = name.split("/")
        assert parts == [MARKER.decode()] or (parts[0] == "memories" and all(is_token(p) for p in parts[1:])), name
    messages = git(folder, "log", "--format=%B", "main")
    for path in re.findall(r"/memories[^\s,]*", messages):
        assert all(TOKEN.fullmatch(p) for p in path.split("/")[2:]), path
    sealed.listing()  # reads log and caches written
    sealed.read("/memories/clients/ada_lovelace.xml")
    everything = plain_everywhere(folder)
    for name in NAMES:
        assert name.encode() not in everything, name
    fsck(folder)
    assert sealed.verify().ok


def test_key_holders_see_real_names_in_history_listing_log_and_show(sealed: Vault, tmp_path: Path, key: str) -> None:
    history = sealed.history()
    assert [v.command for v in history] == [
        "delete",
        "create",
        "insert",
        "rename",
        "str_replace",
        "create",
        "create",
        "create",
    ]
    assert history[3].paths == ("/memories/customers", "/memories/clients")
    assert history[0].paths == ("/memories/preferences",)
    assert "memory: rename /memories/customers -> /memories/clients" in history[3].message
    followed = sealed.history(path="/memories/clients/ada_lovelace.xml")
    assert [v.command for v in followed] == ["insert", "rename", "create"]
    assert [e.path for e in sealed.listing()] == [
        "/memories/clients",
        "/memories/clients/ada_lovelace.xml",
        "/memories/clients/grace_hopper.xml",
        "/memories/notes.md",
    ]
    assert sealed.read("/memories/clients/ada_lovelace.xml", at=history[3].id) == f"<email>{EMAIL}</email>\n"
    env = {**os.environ, "VAULTMEM_KEY": key}
    cli = [sys.executable, "-m", "vaultmem", "--vault", str(tmp_path / "sealed.vault")]
    log = subprocess.run([*cli, "log", "--json"], capture_output=True, text=True, env=env, check=True)
    assert json.loads(log.stdout)[3]["paths"] == ["/memories/customers", "/memories/clients"]
    show = subprocess.run([*cli, "show", history[2].id], capture_output=True, text=True, env=env, check=True)
    assert "/memories/clients/ada_lovelace.xml" in show.stdout and "+<vip/>" in show.stdout
    ls = subprocess.run([*cli, "ls", "/memories/clients"], capture_output=True, text=True, env=env, check=True)
    assert "ada_lovelace.xml" in ls.stdout


def test_stock_git_log_shows_tokens_and_the_textconv_driver_names_the_file(
    sealed: Vault, tmp_path: Path, key: str
) -> None:
    folder = tmp_path / "sealed.vault"
    env = {**os.environ, "VAULTMEM_KEY": key}
    subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(folder), "git-setup"],
        env=env,
        check=True,
        capture_output=True,
    )
    stat = git(folder, "log", "--stat", "--format=%s", "main")
    assert "ada_lovelace" not in stat and "customers" not in stat
    patch = subprocess.run(
        ["git", "--git-dir", str(folder), "log", "-p", "main"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "[vaultmem: /memories/clients/ada_lovelace.xml]" in patch
    assert "+<vip/>" in patch
    # a path copied from git's output reads as the file it stands for, for key holders
    texts = {sealed.read("/" + name) for name in tree_names(folder) if name.startswith("memories/")}
    assert texts == {f"<email>{EMAIL}</email>\n<vip/>\n", "<plan>pro</plan>\n", "ring back\n"}


def test_forget_erases_the_name_with_the_content(sealed: Vault, tmp_path: Path, key: str) -> None:
    folder = tmp_path / "sealed.vault"
    found = sealed.forget("/memories/clients/ada_lovelace.xml", reason="GDPR request 4411", dry_run=True)
    assert len(found.versions) == 3 and not found.names_visible  # created, renamed (sealed again), edited
    blobs = [sealed.read_blob(bytes.fromhex(v.blob)) for v in found.versions]
    done = sealed.forget("/memories/clients/ada_lovelace.xml", reason="GDPR request 4411", actor="ops")
    assert not done.names_visible and any("Names are sealed" in n for n in done.notes)
    sealed.close()
    everything = plain_everywhere(folder)
    for gone in (b"ada_lovelace", EMAIL.encode()):
        assert gone not in everything
    for kept in (b"grace_hopper.xml", b"notes.md"):
        assert kept not in everything  # sealed as ever, though readable to key holders
    assert_no_key_left(folder, key, blobs)
    reopened = Vault.open(folder, key=key)
    assert [e.path for e in reopened.listing()] == [
        "/memories/clients",
        "/memories/clients/grace_hopper.xml",
        "/memories/notes.md",
    ]
    history = reopened.history()
    created = history[-1]
    assert TOKEN.search(created.paths[0]) and "ada_lovelace" not in created.message  # the name is gone
    assert history[-2].paths == ("/memories/customers/grace_hopper.xml",)  # other names still read
    with pytest.raises(ErasedError):
        reopened.read(created.paths[0], at=created.id)
    report = reopened.verify()
    assert report.ok and report.erased == 3
    fsck(folder)
    # forgetting again by name still finds the versions (the token is the name's)
    again = reopened.forget("/memories/clients/ada_lovelace.xml", reason="GDPR request 4411")
    assert again.versions == () and len(again.already) == 3


def test_redact_erases_the_name_only_where_no_other_version_holds_it(sealed: Vault, key: str) -> None:
    versions = sealed.forget("/memories/clients/ada_lovelace.xml", reason="x", dry_run=True).versions
    first = versions[0]
    sealed.redact(first.version, first.path, reason="pasted an e-mail")
    assert sealed.read("/memories/clients/ada_lovelace.xml") == f"<email>{EMAIL}</email>\n<vip/>\n"
    fresh = Vault.open(sealed.path, key=key)
    created = fresh.history()[-1]
    # the redacted version was the only one naming customers/ada_lovelace.xml: that name is gone
    assert created.command == "create" and re.fullmatch(rf"/memories/{TOKEN.pattern}/{TOKEN.pattern}", created.paths[0])
    with pytest.raises(ErasedError):
        fresh.read(created.paths[0], at=created.id)
    # asked by its later name, the history follows the rename back (the folder is named by grace_hopper.xml)
    history = fresh.history(path="/memories/clients/ada_lovelace.xml")
    assert [v.command for v in history] == ["insert", "rename", "create"]
    assert history[1].paths == ("/memories/customers", "/memories/clients")


def test_find_matches_real_names_and_content(sealed: Vault) -> None:
    by_name = sealed.find("ada_lovelace")
    assert by_name and all(m.in_name for m in by_name)
    assert {m.path for m in by_name} == {"/memories/customers/ada_lovelace.xml", "/memories/clients/ada_lovelace.xml"}
    assert {m.path for m in sealed.find(EMAIL)} == {
        "/memories/customers/ada_lovelace.xml",
        "/memories/clients/ada_lovelace.xml",
    }


def test_restore_undo_and_diff_work_through_tokens(sealed: Vault, tmp_path: Path) -> None:
    before_rename = sealed.history()[4].id
    sealed.restore(before_rename, actor="ops")
    assert [e.path for e in sealed.listing(depth=1)] == ["/memories/customers", "/memories/notes.md"]
    assert sealed.diff(before_rename, "main") == ""
    sealed.undo(actor="ops")
    assert [e.path for e in sealed.listing(depth=1)] == ["/memories/clients", "/memories/notes.md"]
    assert sealed.verify().ok


def test_a_wrong_path_under_a_token_is_a_verify_finding(sealed: Vault, tmp_path: Path, key: str) -> None:
    """A version copied under another token (same content, another name) fails as it would under a plain name."""
    folder = tmp_path / "sealed.vault"
    repo = pygit2.Repository(str(folder))
    head = repo[repo.head.target]
    memories = head.tree["memories"]
    tokens = [e.name for e in memories if e.type_str == "blob"]
    assert len(tokens) == 1  # notes.md
    builder = repo.TreeBuilder(memories)
    notes = memories[tokens[0]]
    builder.insert("n" + "a" * TOKEN_LENGTH, notes.id, pygit2.enums.FileMode.BLOB)
    root = repo.TreeBuilder(head.tree)
    root.insert("memories", builder.write(), pygit2.enums.FileMode.TREE)
    forged = repo.create_commit(None, head.author, head.committer, head.message, root.write(), [head.id])
    repo.references["refs/heads/main"].set_target(forged)
    kinds = {(f.kind, f.path) for f in Vault.open(folder, key=key).verify().findings}
    assert ("blob", "/memories/" + "n" + "a" * TOKEN_LENGTH) in kinds


def test_init_and_migrate_refuse_sealed_names_without_format_2(tmp_path: Path, key: str) -> None:
    with pytest.raises(VaultError, match="format 2"):
        Vault.init(tmp_path / "old", key=key, storage_format=1, sealed_names=True)
    assert not (tmp_path / "old").exists()
    old = Vault.init(tmp_path / "v1", key=key, storage_format=1)
    with pytest.raises(VaultError, match="format 2"):
        old.seal_names()
    with pytest.raises(VaultError, match="True or False"):
        Vault.init(tmp_path / "v2", key=key, sealed_names="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("storage_format", [1, 2])
def test_migrate_seals_the_names_from_then_on_and_keeps_the_history(
    tmp_path: Path, key: str, storage_format: int
) -> None:
    folder = tmp_path / "v.vault"
    vault = Vault.init(folder, key=key, storage_format=storage_format)
    story(vault)
    before = [v.id for v in vault.history()]
    old_read = vault.read("/memories/customers/ada_lovelace.xml", at=before[-1])
    env = {**os.environ, "VAULTMEM_KEY": key}
    vault.close()
    run = [sys.executable, "-m", "vaultmem", "--vault", str(folder), "migrate", "--sealed-names", "--json"]
    said = json.loads(subprocess.run(run, capture_output=True, text=True, env=env, check=True).stdout)
    assert said == {"format": 2, "migrated": storage_format == 1, "sealed_names": True, "sealed_now": True}
    again = json.loads(subprocess.run(run, capture_output=True, text=True, env=env, check=True).stdout)
    assert again["sealed_now"] is False
    vault = Vault.open(folder, key=key)
    history = vault.history()
    assert history[0].command == "seal-names" and [v.id for v in history[1:]] == before
    assert all(is_token(n.split("/")[-1]) for n in tree_names(folder) if n.startswith("memories/"))
    assert vault.read("/memories/customers/ada_lovelace.xml", at=before[-1]) == old_read
    assert [v.command for v in vault.history(path="/memories/clients/ada_lovelace.xml")] == [
        "insert",
        "rename",
        "create",
    ]
    assert vault.diff(before[0], "main") == ""
    log = (folder / "vaultmem" / "reads").read_text()
    assert log and "clients" not in log and "notes" not in log  # the reads log names tokens from now on
    write(vault, command="create", path="/memories/clients/new.md", file_text="sealed from the start\n")
    assert vault.verify().ok
    found = vault.forget("/memories/clients/ada_lovelace.xml", reason="GDPR", actor="ops")
    assert found.names_visible and any("before this vault sealed its names" in n for n in found.notes)
    late = vault.forget("/memories/clients/new.md", reason="GDPR", actor="ops")
    assert not late.names_visible
    assert b"new.md" not in plain_everywhere(folder)


def test_a_sealing_cut_short_is_finished_by_the_next_write(tmp_path: Path, key: str) -> None:
    folder = tmp_path / "v.vault"
    vault = Vault.init(folder, key=key)
    story(vault)
    vault.close()
    code = (
        "import os, signal\n"
        "from vaultmem import Vault\n"
        "from vaultmem.git import commits\n"
        "def die(name):\n"
        "    if name == 'seal-names-keyring':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "commits.on_step = die\n"
        f"Vault.open({str(folder)!r}, key={key!r}).seal_names()\n"
    )
    died = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL, died.stderr
    vault = Vault.open(folder, key=key)
    assert vault.sealed_names and vault.history()[0].command == "delete"  # the keyring moved, main not yet
    assert vault.read("/memories/notes.md") == "ring back\n"
    assert vault.verify().ok
    write(vault, command="create", path="/memories/x.md", file_text="x\n")  # the next write seals the tree
    assert all(is_token(n.split("/")[-1]) for n in tree_names(folder) if n.startswith("memories/"))
    assert vault.read("/memories/clients/grace_hopper.xml") == "<plan>pro</plan>\n"
    assert vault.verify().ok


def two_clones(tmp_path: Path, key: str, sealed: bool) -> tuple[Path, Vault, Vault]:
    """A server holding the story, the vault that pushed it, and a clone of it."""
    server = tmp_path / "server.git"
    pygit2.init_repository(str(server), bare=True)
    first = Vault.init(tmp_path / "a.vault", key=key, sealed_names=sealed)
    story(first)
    first.add_remote("origin", str(server))
    first.push()
    return server, first, Vault.clone(str(server), tmp_path / "b.vault", key=key)


def test_clones_share_sealed_names_and_merge_through_tokens(tmp_path: Path, key: str) -> None:
    server, first, second = two_clones(tmp_path, key, sealed=True)
    assert second.sealed_names
    write(first, command="str_replace", path="/memories/notes.md", old_str="ring", new_str="mail")
    write(second, command="str_replace", path="/memories/notes.md", old_str="ring", new_str="text")
    write(second, command="rename", old_path="/memories/clients", new_path="/memories/accounts")
    first.push()
    pulled, _ = second.sync(actor="b")
    assert pulled.merge is not None and pulled.merge.conflicts
    listed = [e.path for e in second.listing()]
    assert "/memories/accounts/ada_lovelace.xml" in listed and "/memories/notes.md" in listed
    assert any(p.startswith("/memories/notes.conflict-") for p in listed)
    merge = second.history(limit=1)[0]
    assert merge.command == "merge" and merge.conflicts and not any(TOKEN.search(c) for c in merge.conflicts)
    assert not TOKEN.search(merge.message)
    raw = git(tmp_path / "b.vault", "log", "-1", "--format=%B", "main")
    assert "notes" not in raw and "accounts" not in raw
    second.push()
    first.sync(actor="a")
    assert [e.path for e in first.listing()] == listed
    for vault in (first, second):
        assert vault.verify().ok
    assert b"ada_lovelace" not in plain_everywhere(server)


def test_the_reads_log_holds_tokens(sealed: Vault, tmp_path: Path) -> None:
    sealed.read("/memories/notes.md")
    write(sealed, command="view", path="/memories/clients/grace_hopper.xml")
    log = (tmp_path / "sealed.vault" / "vaultmem" / "reads").read_text()
    assert log and "grace" not in log and "notes" not in log
    stale = sealed.expire("1d", dry_run=True, now=sealed.clock() + 3 * 86400)
    assert {s.path for s in stale.stale} == {
        "/memories/clients/ada_lovelace.xml",
        "/memories/clients/grace_hopper.xml",
        "/memories/notes.md",
    }


def test_names_seal_per_path_and_per_key() -> None:
    one, two = Names(b"k" * 32), Names(b"l" * 32)
    from vaultmem.core.paths import parse

    # docs/format.md: "n" and the first 10 bytes, lowercase base32, of HMAC-SHA256(key, "vaultmem-name" NUL path)
    mac = hmac.new(b"k" * 32, b"vaultmem-name\0/memories/customers/ada.xml", hashlib.sha256).digest()
    assert one.token(("customers", "ada.xml")) == "n" + base64.b32encode(mac[:10]).decode().lower()

    a = one.seal(parse("/memories/customers/ada.xml"))
    b = one.seal(parse("/memories/clients/ada.xml"))
    assert a.parts[1] != b.parts[1]  # the same name in another folder: another token
    assert one.seal(parse("/memories/customers")).parts == a.parts[:1]
    assert two.seal(parse("/memories/customers/ada.xml")) != a
    assert all(is_token(p) for p in a.parts)
    assert one.known(a) == parse("/memories/customers/ada.xml")
    one.forget()
    assert one.known(a) is None


def test_a_clone_that_wrote_plain_names_merges_into_a_sealed_vault(tmp_path: Path, key: str) -> None:
    _, first, second = two_clones(tmp_path, key, sealed=False)
    assert first.migrate(sealed_names=True, actor="ops")
    first.push()
    write(second, command="create", path="/memories/clients/ada_lovelace.md", file_text="written unsealed\n")
    write(second, command="str_replace", path="/memories/notes.md", old_str="ring", new_str="mail")
    pulled, _ = second.sync(actor="b")
    assert pulled.merge is not None and second.sealed_names
    assert second.read("/memories/notes.md") == "mail back\n"
    assert second.read("/memories/clients/ada_lovelace.md") == "written unsealed\n"
    merged = tree_names(tmp_path / "b.vault")
    assert all(is_token(n.split("/")[-1]) for n in merged if n.startswith("memories/"))
    first.sync(actor="a")
    assert [e.path for e in first.listing()] == [e.path for e in second.listing()]
    for vault in (first, second):
        assert vault.verify().ok
        assert [v.command for v in vault.history(path="/memories/clients/ada_lovelace.xml")] == [
            "insert",
            "rename",
            "create",
        ]


SEAL_AND_DIE = MIGRATE_AND_DIE.replace(".migrate()", ".migrate(sealed_names=True)")


def test_a_migration_to_sealed_names_killed_at_any_step_is_before_or_after_and_runs_again(
    tmp_path: Path, key: str
) -> None:
    template = tmp_path / "v1.vault"
    vault = Vault.init(template, key=key, storage_format=1)
    story(vault)
    before = {e.path: vault.read(e.path) for e in vault.listing() if e.kind == "file"}
    vault.close()
    run = [sys.executable, "-c", SEAL_AND_DIE]
    counted = subprocess.run(
        [*run, str(shutil.copytree(template, tmp_path / "count")), key, "count"], text=True, capture_output=True
    )
    assert counted.returncode == 0, counted.stderr
    steps = int(counted.stdout.split()[-1])
    assert steps >= 8  # the migration's steps, the keyring's, then the seal-names commit's
    for k in range(1, steps + 1):
        case = shutil.copytree(template, tmp_path / f"case-{k}")
        died = subprocess.run([*run, str(case), key, str(k)], capture_output=True, text=True)
        assert died.returncode == 7, (k, died.stderr)
        fsck(case)
        after = Vault.open(case, key=key)
        report = after.verify()  # a copy of the format 1 keyring may wait for the next write to remove it
        assert all("still on the disk" in f.detail for f in report.findings), (k, report.problems)
        assert {e.path: after.read(e.path) for e in after.listing() if e.kind == "file"} == before, k
        after.close()
        Vault.open(case, key=key).migrate(sealed_names=True)
        final = Vault.open(case, key=key)
        assert final.keyring.format == 2 and final.sealed_names and final.verify().ok, k
        assert {e.path: final.read(e.path) for e in final.listing() if e.kind == "file"} == before, k
        assert all(is_token(n.split("/")[-1]) for n in tree_names(case) if n.startswith("memories/")), k
        final.close()


def test_two_clones_that_sealed_their_names_apart_are_refused_and_left_as_they_were(tmp_path: Path, key: str) -> None:
    _, first, second = two_clones(tmp_path, key, sealed=False)
    first.seal_names(actor="a")
    first.push()
    second.seal_names(actor="b")
    heads = {ref: git(tmp_path / "b.vault", "rev-parse", ref).strip() for ref in ("main", "vaultmem-keyring")}
    with pytest.raises(VaultError, match="sealed their names separately"):
        second.pull()
    assert {ref: git(tmp_path / "b.vault", "rev-parse", ref).strip() for ref in heads} == heads
    assert second.read("/memories/notes.md") == "ring back\n" and second.verify().ok
