"""verify(): a clean vault is clean, and every way someone without the key can
alter the history is found, named by its kind, and nothing else is reported.

Each tamper is done as an attacker would: with pygit2 or stock git on the
repository, never through the vault (which would seal what it writes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import commit_count, git

from vaultmem import Vault
from vaultmem.repo.store import KEYRING_REF

BLOB = pygit2.enums.FileMode.BLOB
TREE = pygit2.enums.FileMode.TREE


def vault_files(folder: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            found[str(path.relative_to(folder))] = path.read_bytes()
    return found


def refs(vault_path: Path) -> str:
    return git(vault_path, "for-each-ref", "--format=%(refname) %(objectname)")


def reachable(vault_path: Path, kind: str) -> set[str]:
    """Ids of the objects of ``kind`` reachable from main, as stock git counts them."""
    oids = [line.split()[0] for line in git(vault_path, "rev-list", "--objects", "main").splitlines() if line]
    out = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "--batch-check"],
        input="\n".join(oids) + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()[1] == kind}


def kinds(report: Any) -> set[str]:
    return {f.kind for f in report.findings}


def assert_readable(report: Any) -> None:
    for finding in report.findings:
        line = str(finding)
        assert line and "\n" not in line, line
        assert finding.kind in {"blob", "tree", "message", "seal", "keyring", "object", "shallow", "grafts"}


@pytest.fixture
def sealed(vault: Vault, vault_path: Path, call, clock) -> list[str]:
    """Four honest versions: a.txt, b.txt, notes/c.md, then a.txt edited."""
    steps: list[dict[str, Any]] = [
        dict(command="create", path="/memories/a.txt", file_text="alpha\n"),
        dict(command="create", path="/memories/b.txt", file_text="bravo\n"),
        dict(command="create", path="/memories/notes/c.md", file_text="charlie\n"),
        dict(command="str_replace", path="/memories/a.txt", old_str="alpha", new_str="alpha two"),
    ]
    made = []
    for params in steps:
        clock.advance(30)
        call(**params)
        made.append(git(vault_path, "rev-parse", "main").strip())
    return made


# -- the attacker's tools --------------------------------------------------------


def attacker(vault_path: Path) -> pygit2.Repository:
    return pygit2.Repository(str(vault_path))


def head_commit(repo: pygit2.Repository) -> pygit2.Commit:
    return repo.revparse_single("refs/heads/main").peel(pygit2.Commit)


def raw_commit(repo: pygit2.Repository, oid: pygit2.Oid | str) -> bytes:
    return bytes(repo.odb.read(oid)[1])


def seal_of(raw: bytes) -> str | None:
    """The seal a commit carries, wherever it is (a header or a message trailer)."""
    head, _, message = raw.partition(b"\n\n")
    for line in head.split(b"\n"):
        if line.startswith(b"vaultmem-seal "):
            return line.split(b" ", 1)[1].decode()
    for line in message.split(b"\n"):
        if line.startswith(b"Vaultmem-Seal: "):
            return line.split(b" ", 1)[1].decode()
    return None


def forge(
    repo: pygit2.Repository,
    *,
    tree: pygit2.Oid | None = None,
    author: bytes | None = None,
    message: bytes | None = None,
    on_top: bool = False,
    drop_seal: bool = False,
) -> str:
    """The head commit's exact bytes (its seal included) with one thing changed,
    written as a new object; main is moved to it.  With ``on_top`` it becomes a
    child of the head instead of replacing it."""
    head = head_commit(repo)
    headers, _, body = raw_commit(repo, head.id).partition(b"\n\n")
    lines: list[bytes] = []
    for line in headers.split(b"\n"):
        if line.startswith(b"tree ") and tree is not None:
            line = b"tree " + str(tree).encode()
        elif line.startswith(b"parent ") and on_top:
            continue
        elif line.startswith(b"author ") and author is not None:
            line = author
        elif line.startswith(b"vaultmem-seal ") and drop_seal:
            continue
        lines.append(line)
        if line.startswith(b"tree ") and on_top:
            lines.append(b"parent " + str(head.id).encode())
    if message is not None:
        body = message
    if drop_seal:
        body = b"\n".join(line for line in body.split(b"\n") if not line.startswith(b"Vaultmem-Seal:"))
    data = b"\n".join(lines) + b"\n\n" + body
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, data)
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


def tree_with_entry(repo: pygit2.Repository, name: str, oid: pygit2.Oid) -> pygit2.Oid:
    """The head's tree with ``memories/<name>`` pointing at ``oid``."""
    root = head_commit(repo).tree
    builder = repo.TreeBuilder(root["memories"])
    builder.insert(name, oid, BLOB)
    memories = builder.write()
    outer = repo.TreeBuilder(root)
    outer.insert("memories", memories, TREE)
    return outer.write()


def raw_tree(repo: pygit2.Repository, entries: list[tuple[bytes, bytes, bytes]]) -> pygit2.Oid:
    """A tree object written byte by byte, in the order given: git checks nothing."""
    data = b"".join(mode + b" " + name + b"\0" + oid for mode, name, oid in entries)
    return repo.odb.write(pygit2.enums.ObjectType.TREE, data)


def root_over(repo: pygit2.Repository, memories: pygit2.Oid) -> pygit2.Oid:
    return raw_tree(repo, [(b"40000", b"memories", memories.raw)])


# -- a clean vault ---------------------------------------------------------------


def test_a_clean_vault_verifies_with_exact_counts(vault: Vault, vault_path: Path, sealed: list[str], call) -> None:
    call(command="rename", old_path="/memories/notes", new_path="/memories/archive")
    call(command="delete", path="/memories/b.txt")
    vault.restore(sealed[1], actor="operator")
    report = vault.verify()
    assert report.ok, [str(f) for f in report.findings]
    assert report.findings == []
    assert report.commits == commit_count(vault_path) == 7
    assert report.blobs == len(reachable(vault_path, "blob"))
    assert report.trees > 0


def test_a_new_vault_verifies_empty(vault: Vault) -> None:
    report = vault.verify()
    assert report.ok
    assert (report.commits, report.blobs, report.findings) == (0, 0, [])


def test_every_commit_carries_a_seal_naming_the_active_data_key(
    vault: Vault, vault_path: Path, sealed: list[str]
) -> None:
    repo = attacker(vault_path)
    seals = [seal_of(raw_commit(repo, oid)) for oid in sealed]
    active = vault.keys()[0].id
    for seal in seals:
        assert seal is not None
        assert re.fullmatch(rf"{re.escape(active)} [A-Za-z0-9_-]+=*", seal), seal
    assert len(set(seals)) == 4


def test_progress_counts_commits_up_to_the_total(vault: Vault, sealed: list[str]) -> None:
    calls: list[tuple[int, int]] = []
    report = vault.verify(progress=lambda done, total: calls.append((done, total)))
    assert calls
    assert {total for _done, total in calls} == {4}
    dones = [done for done, _total in calls]
    assert dones == sorted(set(dones))  # strictly increasing
    assert calls[-1] == (4, 4) and report.commits == 4


def test_verify_writes_nothing(vault: Vault, vault_path: Path, key: str, sealed: list[str]) -> None:
    vault.close()  # the writes' upkeep is done: what changes now is verify's doing
    before_files, before_refs = vault_files(vault_path), refs(vault_path)
    vault.verify()
    Vault.open(vault_path, key=key).verify()
    assert refs(vault_path) == before_refs
    assert vault_files(vault_path) == before_files
    assert commit_count(vault_path) == 4


# -- tampering -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["b.txt", "a.txt"])  # an older blob, and one the open vault just wrote
def test_a_blob_edited_inside_its_pack_is_reported(
    vault: Vault, vault_path: Path, key: str, sealed: list[str], name: str
) -> None:
    target = f"/memories/{name}"
    others = {"/memories/a.txt", "/memories/b.txt", "/memories/notes/c.md"} - {target}
    blob = git(vault_path, "rev-parse", f"main:memories/{name}").strip()
    raw = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "blob", blob], capture_output=True, check=True
    ).stdout
    probe = raw.partition(b"\n")[2][20:60]
    hits = []
    for pack in (vault_path / "objects" / "pack").glob("*.pack"):
        data = pack.read_bytes()
        if probe in data:
            hits.append((pack, data.index(probe)))
    assert len(hits) == 1, hits
    pack, offset = hits[0]
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as fh:
        fh.seek(offset + 7)
        old = fh.read(1)
        fh.seek(offset + 7)
        fh.write(b"A" if old != b"A" else b"B")
    for checker in (Vault.open(vault_path, key=key), vault):
        report = checker.verify()
        assert not report.ok
        assert_readable(report)
        assert kinds(report) <= {"blob", "object"}, [str(f) for f in report.findings]
        assert any(f.path == target or blob in str(f) for f in report.findings)
        assert not any(f.path in others for f in report.findings)


def test_a_different_blob_under_a_forged_commit_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    repo = attacker(vault_path)
    raw = bytes(repo.revparse_single("main:memories/a.txt").read_raw())
    header, _, token = raw.partition(b"\n")
    flipped = token[:30] + (b"A" if token[30:31] != b"A" else b"B") + token[31:]
    forged = forge(repo, tree=tree_with_entry(repo, "a.txt", repo.create_blob(header + b"\n" + flipped)))
    report = vault.verify()
    assert_readable(report)
    assert kinds(report) == {"blob", "seal"}, [str(f) for f in report.findings]
    assert [f.path for f in report.findings if f.kind == "blob"] == ["/memories/a.txt"]
    assert [f.version for f in report.findings if f.kind == "seal"] == [forged]
    assert {f.version for f in report.findings} <= {forged, None}


def test_a_blob_swapped_between_paths_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    repo = attacker(vault_path)
    b_blob = repo.revparse_single("main:memories/b.txt").id
    forged = forge(repo, tree=tree_with_entry(repo, "a.txt", b_blob))  # message copied, seal included
    assert git(vault_path, "rev-parse", "main:memories/a.txt") == git(vault_path, "rev-parse", "main:memories/b.txt")
    report = vault.verify()
    assert not report.ok
    assert_readable(report)
    assert kinds(report) == {"blob", "seal"}, [str(f) for f in report.findings]
    assert [f.path for f in report.findings if f.kind == "blob"] == ["/memories/a.txt"]
    assert [f.version for f in report.findings if f.kind == "seal"] == [forged]
    assert not any(f.path in {"/memories/b.txt", "/memories/notes/c.md"} for f in report.findings)
    assert "/memories/a.txt" in str(next(f for f in report.findings if f.kind == "blob"))


@pytest.mark.parametrize("change", ["author", "message", "time"])
def test_a_commit_rewritten_without_the_key_fails_its_seal(
    vault: Vault, vault_path: Path, key: str, sealed: list[str], change: str
) -> None:
    repo = attacker(vault_path)
    head = head_commit(repo)
    raw = raw_commit(repo, head.id)
    assert seal_of(raw) is not None
    if change == "author":
        # Another name, and the trailer to match it: only the seal can tell.
        when = head.author.time
        message = raw.partition(b"\n\n")[2].replace(b"Vaultmem-Actor: support-bot", b"Vaultmem-Actor: mallory")
        forged = forge(repo, author=b"author mallory <mallory> %d +0000" % when, message=message)
    elif change == "message":
        message = raw.partition(b"\n\n")[2].replace(b"Vaultmem-Session: sess-42", b"Vaultmem-Session: sess-99")
        assert message != raw.partition(b"\n\n")[2]
        forged = forge(repo, message=message)
    else:
        when = head.author.time
        author = b"author support-bot <support-bot> %d +0000" % (when - 3600)
        forged = forge(repo, author=author)
    assert forged != str(head.id)
    assert seal_of(raw_commit(repo, forged)) == seal_of(raw)  # the seal was copied verbatim
    assert git(vault_path, "rev-parse", "main^{tree}") == git(vault_path, "rev-parse", f"{head.id}^{{tree}}")
    for checker in (vault, Vault.open(vault_path, key=key)):
        report = checker.verify()
        assert_readable(report)
        assert kinds(report) == {"seal"}, [str(f) for f in report.findings]
        assert [f.version for f in report.findings] == [forged]
        assert forged[:7] in str(report.findings[0])


def test_a_commit_without_a_seal_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    repo = attacker(vault_path)
    forged = forge(repo, drop_seal=True, on_top=True)
    assert seal_of(raw_commit(repo, forged)) is None
    report = vault.verify()
    assert_readable(report)
    assert kinds(report) == {"seal"}, [str(f) for f in report.findings]
    assert {f.version for f in report.findings} == {forged}
    assert report.commits == 5


def test_a_commit_with_an_unparsable_message_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    repo = attacker(vault_path)
    forged = forge(repo, message=b"just a note\n", on_top=True, drop_seal=True)
    report = vault.verify()
    assert_readable(report)
    assert "message" in kinds(report)
    assert kinds(report) <= {"seal", "message"}
    assert {f.version for f in report.findings} == {forged}


def test_a_tree_naming_a_missing_object_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    repo = attacker(vault_path)
    memories = head_commit(repo).tree["memories"]
    entries = [(b"%o" % e.filemode, e.name.encode(), e.id.raw) for e in memories]
    ghost = bytes.fromhex("ab" * 20)
    entries.insert(2, (b"100644", b"ghost.txt", ghost))  # a.txt, b.txt, ghost.txt, notes
    forged = forge(repo, tree=root_over(repo, raw_tree(repo, entries)), on_top=True)
    report = vault.verify()
    assert_readable(report)
    assert "object" in kinds(report), [str(f) for f in report.findings]
    assert kinds(report) <= {"object", "seal", "blob"}
    assert {f.version for f in report.findings} <= {forged, None}
    assert not any(f.path in {"/memories/a.txt", "/memories/b.txt", "/memories/notes/c.md"} for f in report.findings)


def _malformed(entries: list[tuple[bytes, bytes, bytes]], case: str) -> list[tuple[bytes, bytes, bytes]]:
    by_name = {name: (mode, name, oid) for mode, name, oid in entries}
    a, b, notes = by_name[b"a.txt"], by_name[b"b.txt"], by_name[b"notes"]
    if case == "order":
        return [b, a, notes]
    if case == "duplicate":
        return [a, a, b, notes]
    if case == "mode-100755":
        return [(b"100755", a[1], a[2]), b, notes]
    if case == "mode-symlink":
        return [(b"120000", a[1], a[2]), b, notes]
    if case == "zero-padded":
        return [a, b, (b"040000", notes[1], notes[2])]
    if case == "dotdot":
        return [(b"100644", b"..", b[2]), a, b, notes]
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["order", "duplicate", "mode-100755", "mode-symlink", "zero-padded", "dotdot"])
def test_a_malformed_tree_is_reported(vault: Vault, vault_path: Path, sealed: list[str], case: str) -> None:
    repo = attacker(vault_path)
    memories = head_commit(repo).tree["memories"]
    entries = [(b"%o" % e.filemode, e.name.encode(), e.id.raw) for e in memories]
    assert [e[1] for e in entries] == [b"a.txt", b"b.txt", b"notes"]
    forged = forge(repo, tree=root_over(repo, raw_tree(repo, _malformed(entries, case))), on_top=True)
    report = vault.verify()
    assert_readable(report)
    assert "tree" in kinds(report), [str(f) for f in report.findings]
    assert kinds(report) <= {"tree", "seal", "blob"}, [str(f) for f in report.findings]
    assert {f.version for f in report.findings} <= {forged, None}
    assert not any(f.path in {"/memories/b.txt", "/memories/notes/c.md"} for f in report.findings)


# -- the keyring -----------------------------------------------------------------


def edit_keyring(vault_path: Path, edit: Any) -> None:
    """Rewrite keyring.json on its branch as someone without the key would."""
    repo = attacker(vault_path)
    tip = repo.references[KEYRING_REF].peel(pygit2.Commit)
    doc = json.loads(tip.tree["keyring.json"].data)
    edit(doc)
    blob = repo.create_blob((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    builder = repo.TreeBuilder()
    builder.insert("keyring.json", blob, BLOB)
    commit = repo.create_commit(None, tip.author, tip.committer, "vaultmem: keyring\n", builder.write(), [tip.id])
    repo.references.create(KEYRING_REF, commit, force=True)


@pytest.fixture
def rotated(vault: Vault, vault_path: Path, call) -> dict[str, Any]:
    """a.txt and b.txt under the first data key; then a rotation, c.txt and a new b.txt under the second."""
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    call(command="create", path="/memories/b.txt", file_text="bravo\n")
    before = set(git(vault_path, "rev-list", "main").split())
    old = vault.keys()[0].id
    keyring_before = git(vault_path, "rev-parse", KEYRING_REF).strip()
    new = vault.rotate_key().id
    call(command="create", path="/memories/c.txt", file_text="charlie\n")
    call(command="str_replace", path="/memories/b.txt", old_str="bravo", new_str="bravo two")
    assert vault.verify().ok
    return {"old": old, "new": new, "before": before, "keyring_before": keyring_before}


def test_a_keyring_entry_removed_after_rotation_is_reported(
    vault: Vault, vault_path: Path, key: str, rotated: dict[str, Any]
) -> None:
    def drop_old(doc: dict[str, Any]) -> None:
        doc["data_keys"] = [e for e in doc["data_keys"] if e["id"] != rotated["old"]]
        doc["epochs"] = [e for e in doc.get("epochs", []) if e["id"] != rotated["old"]]

    vault._upkeep.stop()  # the writes' upkeep (emptying the trash) is done: what changes now is verify's doing
    edit_keyring(vault_path, drop_old)
    before_files = vault_files(vault_path)
    for checker in (vault, Vault.open(vault_path, key=key)):
        report = checker.verify()
        assert_readable(report)
        assert "keyring" in kinds(report), [str(f) for f in report.findings]
        # The blobs under the removed key: a.txt, and b.txt's first version.
        assert {f.path for f in report.findings if f.kind == "blob"} == {"/memories/a.txt", "/memories/b.txt"}
        assert kinds(report) <= {"keyring", "blob", "seal"}
        for finding in report.findings:
            if finding.kind != "keyring" and finding.version is not None:
                assert finding.version in rotated["before"], str(finding)
    assert vault_files(vault_path) == before_files


@pytest.mark.parametrize("edit", ["switch-active", "drop-mac", "alter-mac", "alter-created"])
def test_a_keyring_edited_without_the_key_is_reported(
    vault: Vault, vault_path: Path, key: str, rotated: dict[str, Any], edit: str
) -> None:
    def change(doc: dict[str, Any]) -> None:
        assert "mac" in doc
        if edit == "switch-active":
            doc["active"] = rotated["old"]
        elif edit == "drop-mac":
            del doc["mac"]
        elif edit == "alter-mac":
            doc["mac"] = doc["mac"][:-3] + ("AAA" if doc["mac"][-3:] != "AAA" else "BBB")
        else:
            (doc.get("epochs") or doc["data_keys"])[0]["created"] += 1

    edit_keyring(vault_path, change)
    for checker in (vault, Vault.open(vault_path, key=key)):
        report = checker.verify()
        assert_readable(report)
        assert kinds(report) == {"keyring"}, [str(f) for f in report.findings]


def test_a_keyring_rolled_back_to_before_a_rotation_is_reported(
    vault: Vault, vault_path: Path, key: str, rotated: dict[str, Any]
) -> None:
    git(vault_path, "update-ref", KEYRING_REF, rotated["keyring_before"])
    # The vault that is open knows the newer key: for it, an entry was removed.
    report = vault.verify()
    assert_readable(report)
    assert "keyring" in kinds(report), [str(f) for f in report.findings]
    # Reopened, the old keyring is all there is; the files written under the
    # newer key no longer open, and nothing else is blamed.
    report = Vault.open(vault_path, key=key).verify()
    assert not report.ok
    assert_readable(report)
    assert {"/memories/b.txt", "/memories/c.txt"} <= {f.path for f in report.findings if f.kind == "blob"}
    assert "/memories/a.txt" not in {f.path for f in report.findings}


def test_a_deleted_keyring_branch_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    git(vault_path, "update-ref", "-d", KEYRING_REF)
    report = vault.verify()
    assert_readable(report)
    assert "keyring" in kinds(report)
    assert report.commits == 4


# -- files that make stock git hide versions ---------------------------------------


def hiding_kinds(report: Any) -> set[str]:
    return {f.kind for f in report.findings} & {"shallow", "grafts"}


def test_a_shallow_file_from_a_shallow_fetch_is_reported(
    vault: Vault, vault_path: Path, key: str, sealed: list[str], tmp_path: Path
) -> None:
    """An operator's `git fetch --depth=1` into the vault writes `shallow`:
    git log then shows one version; verify still checks all four and says so."""
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(vault_path), str(mirror)], check=True)
    git(vault_path, "fetch", "-q", "--depth=1", str(mirror), "main:refs/remotes/mirror/main")
    assert (vault_path / "shallow").exists()
    assert commit_count(vault_path) == 1  # what git log shows now
    for checker in (vault, Vault.open(vault_path, key=key)):
        report = checker.verify()
        assert hiding_kinds(report) == {"shallow"}, [str(f) for f in report.findings]
        assert kinds(report) == {"shallow"}
        assert report.commits == 4  # read past the file
        [finding] = report.findings
        line = str(finding)
        assert "\n" not in line
        assert "3 of the 4 versions" in line and sealed[-1][:10] in line, line
        assert "shallow" in finding.detail and "remove" in finding.detail


def test_a_shallow_file_cutting_the_history_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    (vault_path / "shallow").write_text(sealed[2] + "\n")
    assert commit_count(vault_path) == 2
    report = vault.verify()
    assert kinds(report) == {"shallow"}, [str(f) for f in report.findings]
    assert report.commits == 4
    assert "2 of the 4 versions" in str(report.findings[0])


@pytest.mark.parametrize("graft", ["no parents", "skip one version"])
def test_an_info_grafts_file_is_reported(vault: Vault, vault_path: Path, sealed: list[str], graft: str) -> None:
    (vault_path / "info").mkdir(exist_ok=True)
    line = sealed[2] if graft == "no parents" else f"{sealed[2]} {sealed[0]}"
    (vault_path / "info" / "grafts").write_text(line + "\n")
    hidden = 2 if graft == "no parents" else 1
    assert commit_count(vault_path) == 4 - hidden
    report = vault.verify()
    assert kinds(report) == {"grafts"}, [str(f) for f in report.findings]
    assert report.commits == 4
    assert f"{hidden} of the 4 versions" in str(report.findings[0])


def test_a_grafted_parent_hides_a_forged_history_from_git_but_not_from_verify(
    vault: Vault, vault_path: Path, sealed: list[str]
) -> None:
    """A graft can splice a commit made without the key into what git shows;
    verify reads the real parents, so the real history is what it checks."""
    repo = attacker(vault_path)
    before = head_commit(repo)
    forged = forge(repo, message=b"memory: create /memories/x.txt\n\nVaultmem-Command: create\n", on_top=True)
    git(vault_path, "update-ref", "refs/heads/main", str(before.id))
    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / "info" / "grafts").write_text(f"{sealed[1]} {forged}\n")
    assert forged in git(vault_path, "rev-list", "main")  # git log shows the forged version
    report = vault.verify()
    assert kinds(report) == {"grafts"}, [str(f) for f in report.findings]
    assert report.commits == 4
    assert "1 version that is not" in str(report.findings[0]), str(report.findings[0])


def test_the_cli_prints_the_shallow_finding(vault: Vault, vault_path: Path, key: str, sealed: list[str]) -> None:
    (vault_path / "shallow").write_text(sealed[1] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "verify", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert out["commits"] == 4
    assert [f["kind"] for f in out["findings"]] == ["shallow"]


def test_a_replace_ref_is_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    """git shows the object a replace ref names in place of the real one."""
    repo = attacker(vault_path)
    before = head_commit(repo)
    forged = forge(repo, author=b"author ops-bob <ops-bob@vaultmem> 1790000000 +0000")
    git(vault_path, "update-ref", "refs/heads/main", str(before.id))
    git(vault_path, "replace", str(before.id), forged)
    assert git(vault_path, "log", "-1", "--format=%an").strip() == "ops-bob"  # what git shows now
    report = vault.verify()
    assert kinds(report) == {"replace"}, [str(f) for f in report.findings]
    assert report.commits == 4
    assert f"version {sealed[-1][:10]}" in str(report.findings[0])
    assert f"git replace -d {sealed[-1]}" in str(report.findings[0])


def test_grafts_converted_to_replace_refs_are_still_reported(vault: Vault, vault_path: Path, sealed: list[str]) -> None:
    """git's own advice for info/grafts is `git replace --convert-graft-file`."""
    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / "info" / "grafts").write_text(sealed[2] + "\n")
    git(vault_path, "replace", "--convert-graft-file")
    assert not (vault_path / "info" / "grafts").exists()
    assert commit_count(vault_path) == 2
    report = vault.verify()
    assert kinds(report) == {"replace"}, [str(f) for f in report.findings]
    assert report.commits == 4
