"""Erasure without rewriting history: forget, redact, forget_matching.

Every test works on real vaults with real keys and checks with stock git; the
byte scans read every file under the vault folder (objects loose and packed,
refs, the state folder, the journal, the trash)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pygit2
import pytest

from tests.conftest import FakeClock, commit_count, git
from vaultmem import Vault, VaultMemoryTool
from vaultmem.core import shred
from vaultmem.core.crypto import Keyring, UserKey
from vaultmem.errors import ErasedError, NotFoundError, VaultError
from vaultmem.git import commits

MARKER = "ada.lovelace@example.com"


def write(vault: Vault, **call: str) -> str:
    return VaultMemoryTool(vault, actor="support-bot").call(call)


@pytest.fixture
def story(vault: Vault) -> dict[str, str]:
    """ada.md written, edited, renamed; notes.md and other.md beside it."""
    write(vault, command="create", path="/memories/customers/ada.md", file_text=f"email: {MARKER}\nplan: pro\n")
    first = vault.head()
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    write(vault, command="str_replace", path="/memories/customers/ada.md", old_str="pro", new_str="team")
    second = vault.head()
    write(vault, command="rename", old_path="/memories/customers/ada.md", new_path="/memories/customers/a-l.md")
    write(vault, command="create", path="/memories/notes.md", file_text=f"called {MARKER} today\n")
    return {"first": str(first), "second": str(second)}


def every_file_bytes(folder: Path) -> list[tuple[str, bytes]]:
    out = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # an open vault's upkeep emptied its trash meanwhile: gone, holding nothing
                continue
            out.append((str(path.relative_to(folder)), data))
    return out


def all_objects(folder: Path) -> bytes:
    """Every object git can find, reachable or not, as its plain bytes."""
    return subprocess.run(
        ["git", "-C", str(folder), "cat-file", "--batch-all-objects", "--batch", "--unordered"],
        capture_output=True,
        check=True,
    ).stdout


def inflated(data: bytes) -> list[bytes]:
    """``data`` itself and every zlib stream found in it (loose objects, git's packs)."""
    out = [data]
    at = 0
    while True:
        at = data.find(b"\x78", at)
        if at < 0 or at + 2 > len(data):
            return out
        try:
            piece = zlib.decompressobj().decompress(data[at:])
            if piece:
                out.append(piece)
        except zlib.error:
            pass
        at += 1


def keyring_docs(blobs: list[bytes]) -> list[dict[str, object]]:
    docs = []
    for data in blobs:
        start = 0
        while (start := data.find(b'{\n  "active"', start)) >= 0:
            end = data.find(b"\n}\n", start)
            if end < 0:
                break
            with contextlib.suppress(ValueError):
                docs.append(json.loads(data[start : end + 3]))
            start = end
    return docs


def assert_no_key_left(folder: Path, key: str, erased: list[bytes]) -> None:
    """No keyring anywhere under ``folder`` (any object, any file, any zlib
    stream in them) derives a key that opens one of ``erased``."""
    user = UserKey.from_string(key)
    pieces = [all_objects(folder)]
    for _name, data in every_file_bytes(folder):
        pieces.extend(inflated(data) if len(data) < 4 << 20 else [data])
    docs = keyring_docs(pieces)
    assert docs, "the scan found no keyring at all: it would prove nothing"
    for doc in docs:
        ring = Keyring.unlock(doc, user)  # type: ignore[arg-type]
        for blob in erased:
            with pytest.raises(VaultError):
                ring.open_any(blob)
        for blob in erased:
            epoch, nonce = ring.nonce_of(blob) or ("", 0)
            if epoch in ring.covers:
                assert shred.leaf(ring.covers[epoch], nonce) is None


def test_forget_erases_every_version_following_renames_and_keeps_the_chain(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    ids_before = git(vault_path, "rev-list", "main").split()
    found = vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", actor="ops-alice", dry_run=True)
    assert [v.path for v in found.versions] == [
        "/memories/customers/ada.md",
        "/memories/customers/ada.md",
        "/memories/customers/a-l.md",
    ]
    assert commit_count(vault_path) == len(ids_before)  # the dry run wrote nothing
    erased_blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in found.versions]
    result = vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", actor="ops-alice")
    assert result.commit is not None and result.removed == ("/memories/customers/a-l.md",)
    # one audited commit; every earlier commit keeps its id
    assert git(vault_path, "rev-list", "main").split()[1:] == ids_before
    message = git(vault_path, "log", "-1", "--format=%B", "main")
    assert "Vaultmem-Command: forget" in message and "Vaultmem-Reason: GDPR request 4411" in message
    words = re.sub(r"\b[0-9a-f]{40}\b", "", message)  # ids are hex: "ada" may be in one by chance
    assert "ada" not in words and "a-l" not in words  # never the erased name
    assert message.count("Vaultmem-Erased: ") == 3
    for version in found.versions:
        assert f"Vaultmem-Erased: {version.version} {version.blob}" in message
    # unreadable to key holders, with a clear error
    for at in (story["first"], story["second"]):
        with pytest.raises(ErasedError, match=r"erased on \d{4}-\d\d-\d\d by ops-alice \(GDPR request 4411\)"):
            vault.read("/memories/customers/ada.md", at=at)
        reopened = Vault.open(vault_path, key=key)
        with pytest.raises(ErasedError):
            reopened.read("/memories/customers/ada.md", at=at)
    with pytest.raises(NotFoundError):
        vault.read("/memories/customers/a-l.md")
    # other files' history is intact
    assert vault.read("/memories/other.md") == "unrelated\n"
    assert MARKER in vault.read("/memories/notes.md")
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok, report.problems
    assert report.erased == 3
    subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict"], check=True, capture_output=True)
    assert_no_key_left(vault_path, key, erased_blobs)


def test_redacting_one_version_leaves_the_versions_before_and_after_it(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    write(vault, command="str_replace", path="/memories/customers/a-l.md", old_str="team", new_str="enterprise")
    result = vault.redact(story["second"], "/memories/customers/ada.md", reason="wrong customer", actor="ops")
    assert [v.version for v in result.versions] == [story["second"]]
    assert result.removed == ()
    assert MARKER in vault.read("/memories/customers/ada.md", at=story["first"])
    with pytest.raises(ErasedError, match=r"\(wrong customer\)"):
        vault.read("/memories/customers/ada.md", at=story["second"])
    assert "enterprise" in vault.read("/memories/customers/a-l.md")
    assert Vault.open(vault_path, key=key).verify().ok


def test_redacting_the_current_version_takes_the_file_out_of_the_memory(vault: Vault, story: dict[str, str]) -> None:
    result = vault.redact("main", "/memories/notes.md", reason="pasted by mistake")
    assert result.removed == ("/memories/notes.md",)
    assert [e.path for e in vault.listing("/memories")] == [
        "/memories/customers",
        "/memories/customers/a-l.md",
        "/memories/other.md",
    ]


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed-names"])
def test_forget_of_a_folder_follows_a_file_moved_into_it_back_to_where_it_came_from(
    tmp_path: Path, key: str, sealed: bool
) -> None:
    vault = Vault.init(tmp_path / "v.vault", key=key, sealed_names=sealed)
    write(vault, command="create", path="/memories/old/x.txt", file_text="x one\n")
    write(vault, command="create", path="/memories/inbox/y.txt", file_text="y one\n")
    write(vault, command="str_replace", path="/memories/inbox/y.txt", old_str="one", new_str="two")
    write(vault, command="create", path="/memories/inbox/keep.txt", file_text="unrelated\n")
    write(vault, command="rename", old_path="/memories/old", new_path="/memories/person")
    write(vault, command="rename", old_path="/memories/inbox/y.txt", new_path="/memories/person/y.txt")
    listed = vault.forget("/memories/person", reason="erasure request", dry_run=True).versions
    assert sorted({v.path for v in listed}) == [
        "/memories/inbox/y.txt",
        "/memories/old/x.txt",
        "/memories/person/x.txt",
        "/memories/person/y.txt",
    ]
    vault.forget("/memories/person", reason="erasure request")
    assert vault.find("one") == [] and vault.find("two") == []
    assert vault.read("/memories/inbox/keep.txt") == "unrelated\n"
    assert vault.verify().ok


def test_forget_matching_lists_first_then_forgets_every_match(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    dry = vault.forget_matching(MARKER, reason="GDPR request 4411", dry_run=True)
    assert sorted({v.path for v in dry.versions}) == [
        "/memories/customers/a-l.md",
        "/memories/customers/ada.md",
        "/memories/notes.md",
    ]
    assert not vault.verify().erased
    done = vault.forget_matching(MARKER, reason="GDPR request 4411")
    assert {v.blob for v in done.versions} == {v.blob for v in dry.versions}
    assert vault.find(MARKER) == []
    assert vault.read("/memories/other.md") == "unrelated\n"
    again = vault.forget_matching(MARKER, reason="GDPR request 4411")
    assert again.versions == () and again.commit is None  # nothing left: no second commit
    assert Vault.open(vault_path, key=key).verify().ok


def test_restore_and_undo_refuse_to_bring_erased_content_back(
    vault: Vault, vault_path: Path, story: dict[str, str]
) -> None:
    vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", actor="ops")
    count = commit_count(vault_path)
    with pytest.raises(ErasedError, match="erased content is never restored"):
        vault.undo()
    with pytest.raises(ErasedError, match=r"erased on .* by ops"):
        vault.restore(story["second"])
    with pytest.raises(ErasedError):
        vault.restore(story["second"], path="/memories/customers/ada.md")
    assert commit_count(vault_path) == count  # nothing was changed
    # a path that holds nothing erased still restores from that version
    write(vault, command="str_replace", path="/memories/other.md", old_str="unrelated", new_str="changed")
    assert vault.restore(story["second"], path="/memories/other.md") is not None
    assert vault.read("/memories/other.md") == "unrelated\n"


def test_a_vault_opened_elsewhere_stops_reading_what_was_erased(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    other = Vault.open(vault_path, key=key)
    assert MARKER in other.read("/memories/customers/ada.md", at=story["first"])
    vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411")
    with pytest.raises(ErasedError):
        other.read("/memories/customers/ada.md", at=story["first"])
    write(other, command="create", path="/memories/after.md", file_text="x\n")  # and it writes on
    assert Vault.open(vault_path, key=key).verify().ok


def test_erasure_after_stock_git_gc_rewrites_the_pack_that_held_the_old_keyring(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    vault.close()
    subprocess.run(["git", "-C", str(vault_path), "gc", "--quiet"], check=True)
    vault = Vault.open(vault_path, key=key)
    found = vault.forget("/memories/customers/a-l.md", reason="r", dry_run=True)
    blobs = [vault.read_blob(bytes.fromhex(v.blob)) for v in found.versions]
    vault.forget("/memories/customers/a-l.md", reason="r")
    assert_no_key_left(vault_path, key, blobs)
    assert vault.read("/memories/other.md") == "unrelated\n"
    subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict"], check=True, capture_output=True)
    assert Vault.open(vault_path, key=key).verify().ok


def test_erasure_needs_a_reason_and_changes_nothing_without_one(
    vault: Vault, vault_path: Path, story: dict[str, str]
) -> None:
    count = commit_count(vault_path)
    for reason in ("", "   ", "two\nlines", "x" * 501, None):
        with pytest.raises(VaultError):
            vault.forget("/memories/notes.md", reason=reason)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        vault.forget("/memories/never.md", reason="r")
    assert commit_count(vault_path) == count


def test_a_format_1_vault_reads_and_refuses_erasure_until_migrated(tmp_path: Path, key: str) -> None:
    old = Vault.init(tmp_path / "v1", key=key, storage_format=1)
    write(old, command="create", path="/memories/a.md", file_text="a\n")
    assert old.keyring.format == 1
    reopened = Vault.open(tmp_path / "v1", key=key)
    assert reopened.read("/memories/a.md") == "a\n"
    with pytest.raises(VaultError, match="migrate"):
        reopened.forget("/memories/a.md", reason="r")
    assert reopened.verify().ok


def test_the_textconv_driver_says_a_version_was_erased(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", actor="ops")
    blob = vault_path.parent / "blob.txt"
    spec = f"{story['first']}:memories/customers/ada.md"
    blob.write_bytes(vault.read_blob(pygit2.Repository(str(vault_path)).revparse_single(spec).id.raw))
    done = subprocess.run(
        ["vaultmem", "--vault", str(vault_path), "textconv", str(blob)],
        capture_output=True,
        text=True,
        env={**os.environ, "VAULTMEM_KEY": key},
    )
    assert "erased on" in done.stdout + done.stderr and "GDPR request 4411" in done.stdout + done.stderr
    assert MARKER not in done.stdout


def test_cli_forget_and_redact_with_dry_run_and_json(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    env = {**os.environ, "VAULTMEM_KEY": key}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["vaultmem", "--vault", str(vault_path), *args], capture_output=True, text=True, env=env)

    dry = run("forget", "--matching", MARKER, "--reason", "GDPR 4411", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert listed["dry_run"] is True and len(listed["erased"]) == 4 and listed["commit"] is None
    text = run("redact", story["first"], "/memories/customers/ada.md", "--reason", "mistake", "--actor", "ops")
    assert text.returncode == 0, text.stderr
    assert "Erased 1 file version" in text.stdout
    again = run("forget", "/memories/customers/a-l.md", "--reason", "GDPR 4411", "--json")
    done = json.loads(again.stdout)
    assert len(done["erased"]) == 2 and len(done["already_erased"]) == 1 and done["commit"]
    missing = run("forget", "--reason", "x")
    assert missing.returncode != 0 and "PATH" in missing.stderr
    shown = run("cat", "/memories/customers/ada.md", "--at", story["first"])
    assert shown.returncode != 0 and "erased on" in shown.stderr and "(mistake)" in shown.stderr
    log = run("log", "--json")
    assert json.loads(log.stdout)[0]["command"] == "forget"


def test_forget_of_a_large_pattern_of_files_and_reopen(tmp_path: Path, key: str) -> None:
    clock = FakeClock()
    vault = Vault.init(tmp_path / "v", key=key, clock=clock)
    for i in range(30):
        write(vault, command="create", path=f"/memories/t{i}.md", file_text=f"ticket TS-{i:06d} for {MARKER}\n")
    result = vault.forget_matching(r"TS-0000[0-9]{2}", regex=True, reason="retention of tickets")
    assert len(result.versions) == 30 and len(result.removed) == 30
    assert Vault.open(tmp_path / "v", key=key).verify().ok


def test_erasure_leaves_no_marker_anywhere_and_keeps_git_clean(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    vault.forget_matching(MARKER, reason="GDPR request 4411")
    for name, data in every_file_bytes(vault_path):
        for piece in inflated(data) if len(data) < 4 << 20 else [data]:
            assert MARKER.encode() not in piece, name
            assert base64.b64encode(MARKER.encode()) not in piece, name
    subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--full"], check=True, capture_output=True)


# -- killed mid-erasure ------------------------------------------------------------------

DIE_AT = r"""
import os, sys
from vaultmem import Vault
from vaultmem.git import commits
path, key, target, mode = sys.argv[1:5]
seen = []
def die(name):
    seen.append(name)
    if mode != "count" and len(seen) == int(mode):
        os._exit(7)  # as a SIGKILL would: nothing is cleaned up
commits.on_step = die
vault = Vault.open(path, key=key)
vault.forget(target, reason="GDPR request 4411", actor="ops")
print(len(seen))
"""


def run_child(vault_path: Path, key: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DIE_AT, str(vault_path), key, "/memories/customers/a-l.md", mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_forget_killed_at_any_step_is_before_or_after_and_finishes_on_the_next_write(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str], tmp_path: Path
) -> None:
    vault.close()
    template = tmp_path / "template.vault"
    shutil.copytree(vault_path, template)
    counted = run_child(vault_path, key, "count")
    assert counted.returncode == 0, counted.stderr
    steps = int(counted.stdout.split()[-1])
    assert steps >= 15  # the forget commit, the keyring, the removal of the old one
    blobs = None
    for k in range(1, steps + 1):
        case = tmp_path / f"case-{k}.vault"
        shutil.copytree(template, case)
        if blobs is None:
            opened = Vault.open(case, key=key)
            listed = opened.forget("/memories/customers/a-l.md", reason="r", dry_run=True).versions
            blobs = [opened.read_blob(bytes.fromhex(v.blob)) for v in listed]
            opened.close()
        died = run_child(case, key, str(k))
        assert died.returncode == 7, (k, died.stderr)
        subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
        after = Vault.open(case, key=key)
        report = after.verify()
        assert {f.kind for f in report.findings} <= {"erasure"}, (k, report.problems)
        # the next write finishes a recorded erasure (or drops one whose commit never landed;
        # a commit whose journal record was durable is finished by that write first)
        write(after, command="create", path="/memories/after.md", file_text="next\n")
        forgot = "memory: forget" in git(case, "log", "--format=%s", "main")
        report = Vault.open(case, key=key).verify()
        assert report.ok, (k, report.problems)
        if forgot:
            assert report.erased == 3, k
            assert_no_key_left(case, key, blobs)
        else:
            assert report.erased == 0, k
            assert after.read("/memories/customers/a-l.md").startswith("email:")
        # and running the same erasure again is always safe
        again = Vault.open(case, key=key).forget("/memories/customers/a-l.md", reason="again")
        assert len(again.versions) == (0 if forgot else 3), k
        assert Vault.open(case, key=key).verify().ok
        assert_no_key_left(case, key, blobs)


def test_a_forget_killed_after_its_keyring_commit_removes_the_old_keyring_from_git_s_pack(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str], tmp_path: Path
) -> None:
    """`git gc` packed the keyring with everything else before the erasure.
    Killed at any step from the new keyring's commit on, the erasure has
    recorded the old keyring first: verify reports the copy still on the disk,
    the next write removes it from git's pack, and the same erasure run again
    says there is nothing left to erase and leaves no copy either."""
    vault.close()
    git(vault_path, "gc", "--quiet")  # its commit-graph names the old keyring's commits too
    template = tmp_path / "template.vault"
    shutil.copytree(vault_path, template)
    old_ring = git(template, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    names: list[str] = []
    commits.on_step = names.append
    try:
        Vault.open(shutil.copytree(template, tmp_path / "count"), key=key).forget(
            "/memories/customers/a-l.md", reason="count"
        )
    finally:
        commits.on_step = None
    first = names.index("erase-keys") + 1
    assert "prune-rewritten" in names[first:]  # git's pack is rewritten without the old keyring
    reported = 0
    for k in range(first, len(names) + 1):
        case = shutil.copytree(template, tmp_path / f"case-{k}")
        opened = Vault.open(case, key=key)
        listed = opened.forget("/memories/customers/a-l.md", reason="r", dry_run=True).versions
        blobs = [opened.read_blob(bytes.fromhex(v.blob)) for v in listed]
        opened.close()
        died = run_child(case, key, str(k))
        assert died.returncode == 7, (k, died.stderr)
        subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
        with Vault.open(case, key=key) as after:
            report = after.verify()
        assert {f.kind for f in report.findings} <= {"erasure"}, (k, report.problems)
        moved = git(case, "rev-parse", "refs/heads/vaultmem-keyring").strip() != old_ring
        still_there = subprocess.run(["git", "-C", str(case), "cat-file", "-e", old_ring]).returncode == 0
        if moved and still_there:
            assert any("still on the disk" in f.detail for f in report.findings), (k, report.problems)
            reported += 1
        with Vault.open(case, key=key) as after:
            write(after, command="create", path="/memories/after.md", file_text="next\n")
        with Vault.open(case, key=key) as after:
            report = after.verify()
        assert report.ok and report.erased == 3, (k, report.problems)
        assert_no_key_left(case, key, blobs)
        with Vault.open(case, key=key) as after:
            again = after.forget("/memories/customers/a-l.md", reason="again")
        assert again.versions == () and len(again.already) == 3, k
        assert_no_key_left(case, key, blobs)
        subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
    assert reported  # the steps between the keyring's move and the removal were met


# -- writes that land while an erasure runs ---------------------------------------------


def erased_by_last_commit(vault_path: Path) -> set[str]:
    """The blobs the last commit's ``Vaultmem-Erased`` trailers record."""
    message = git(vault_path, "log", "-1", "--format=%B", "main")
    return {line.split()[-1] for line in message.splitlines() if line.startswith("Vaultmem-Erased: ")}


def push_at_step(step: str, other: Vault, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """At ``step`` of the next write, ``other`` (a clone) pushes what it wrote
    into the vault, as a push from another machine lands while this one works."""
    pushed: list[str] = []

    def at(name: str) -> None:
        if name == step and not pushed:
            pushed.append(",".join(other.push().moved))

    monkeypatch.setattr(commits, "on_step", at)
    return pushed


@pytest.mark.parametrize("verb", ["forget", "forget_matching", "redact"])
def test_an_erasure_records_exactly_what_it_reports_when_a_version_lands_meanwhile(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    """A push lands on main between the erasure's first look and its commit:
    the erasure erases (and reports) what main holds when it commits."""
    write(vault, command="create", path="/memories/p.txt", file_text="SECRETMARK v1\n")
    first = str(vault.head())
    other = Vault.clone(str(vault_path), tmp_path / "other.vault", key=key)
    write(other, command="str_replace", path="/memories/p.txt", old_str="v1", new_str="v2")
    pushed = push_at_step("erase-begun", other, monkeypatch)
    if verb == "forget":
        result = vault.forget("/memories/p.txt", reason="GDPR request 4411", actor="ops")
    elif verb == "forget_matching":
        result = vault.forget_matching("SECRETMARK", reason="GDPR request 4411", actor="ops")
    else:
        result = vault.redact(first, "/memories/p.txt", reason="GDPR request 4411", actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    assert pushed == ["main"]
    assert [v.command for v in vault.history()] == ["forget", "str_replace", "create"]
    assert {v.blob for v in result.versions} == erased_by_last_commit(vault_path)  # reported = recorded
    if verb == "redact":  # v1 only; v2 is the file's content now, and stays
        assert [(v.version, v.current) for v in result.versions] == [(first, False)]
        assert result.removed == ()
        assert vault.read("/memories/p.txt") == "SECRETMARK v2\n"
    else:  # every version, the one that landed meanwhile too
        assert len(result.versions) == 2 and result.removed == ("/memories/p.txt",)
        with pytest.raises(NotFoundError):
            vault.read("/memories/p.txt")
        assert vault.find("SECRETMARK") == []
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok, report.problems


def test_a_forget_erases_a_version_another_process_writes_before_it_takes_the_lock(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(vault, command="create", path="/memories/p.txt", file_text="SECRETMARK v1\n")
    env = {**os.environ, "VAULTMEM_KEY": key}
    edit = json.dumps({"command": "str_replace", "path": "/memories/p.txt", "old_str": "v1", "new_str": "v2"})
    wrote: list[int] = []

    def at(name: str) -> None:  # the versions are listed; the writer lock is not held yet
        if name == "erase-listed" and not wrote:
            done = subprocess.run(["vaultmem", "--vault", str(vault_path), "call", edit], env=env, capture_output=True)
            wrote.append(done.returncode)

    monkeypatch.setattr(commits, "on_step", at)
    result = vault.forget("/memories/p.txt", reason="GDPR request 4411", actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    assert wrote == [0]
    assert [v.command for v in vault.history()] == ["forget", "str_replace", "create"]
    assert len(result.versions) == 2 and result.removed == ("/memories/p.txt",)
    assert {v.blob for v in result.versions} == erased_by_last_commit(vault_path)
    with pytest.raises(NotFoundError):
        vault.read("/memories/p.txt")
    assert vault.find("SECRETMARK") == []


def test_retention_keeps_a_version_restored_while_it_runs(
    vault: Vault, vault_path: Path, key: str, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restore reuses the old version's blob: restored while retention runs,
    it is a file's current content when retention commits, and stays."""
    write(vault, command="create", path="/memories/p.txt", file_text="old text\n")
    first = str(vault.head())
    clock.advance(10 * 86400)
    write(vault, command="str_replace", path="/memories/p.txt", old_str="old", new_str="new")
    other = Vault.clone(str(vault_path), tmp_path / "other.vault", key=key, clock=clock)
    other.restore(first, "/memories/p.txt", actor="ops-bob")
    pushed = push_at_step("erase-begun", other, monkeypatch)
    result = vault.apply_retention("1d", now=clock.now + 86400 * 30, actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    assert pushed == ["main"]
    assert [v.command for v in vault.history()] == ["forget", "restore", "str_replace", "create"]
    assert vault.read("/memories/p.txt") == "old text\n"  # the restore stands
    assert result.removed == ()
    assert {v.blob for v in result.versions} == erased_by_last_commit(vault_path)
    assert all(not v.current for v in result.versions) and len(result.versions) == 1  # "new text" only
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok, report.problems


# -- retention ----------------------------------------------------------------------------


def test_retention_forgets_exactly_the_old_versions_that_are_not_current(tmp_path: Path, key: str) -> None:
    clock = FakeClock(1_790_000_000.0)
    day = 86400
    vault = Vault.init(tmp_path / "v", key=key, clock=clock)
    write(vault, command="create", path="/memories/kept.md", file_text="old but current\n")  # day 0
    write(vault, command="create", path="/memories/edited.md", file_text="v1\n")  # day 0
    clock.now += 100 * day
    write(vault, command="str_replace", path="/memories/edited.md", old_str="v1", new_str="v2")  # day 100
    write(vault, command="create", path="/memories/gone.md", file_text="deleted later\n")  # day 100
    clock.now += 200 * day
    write(vault, command="str_replace", path="/memories/edited.md", old_str="v2", new_str="v3")  # day 300
    write(vault, command="delete", path="/memories/gone.md")  # day 300
    clock.now += 50 * day  # now: day 350
    vault.set_policy(content_retention="300d", actor="ops")
    assert vault.policy.content_retention == 300 * day
    dry = vault.apply_retention(dry_run=True)
    # written before day 50 and not current: only edited.md's first version
    assert [(v.path, vault.read(v.path, at=v.version)) for v in dry.versions] == [("/memories/edited.md", "v1\n")]
    clock.now += 60 * day  # day 410: now day 100's versions are older than 300 days too
    dry = vault.apply_retention(dry_run=True)
    assert sorted(v.path for v in dry.versions) == ["/memories/edited.md", "/memories/edited.md", "/memories/gone.md"]
    done = vault.apply_retention(actor="ops")
    assert done.commit is not None and done.removed == ()
    message = git(tmp_path / "v", "log", "-1", "--format=%B", "main")
    assert "Vaultmem-Erasure: retention" in message and "older than 300 days" in message
    assert vault.read("/memories/kept.md") == "old but current\n"  # current content stays, however old
    assert vault.read("/memories/edited.md") == "v3\n"
    for version in dry.versions:
        with pytest.raises(ErasedError, match="content retention"):
            vault.read(version.path, at=version.version)
    assert vault.apply_retention().commit is None  # nothing more: no empty commit
    assert Vault.open(tmp_path / "v", key=key).verify().ok


def test_a_tool_applies_the_policy_s_retention_by_itself(tmp_path: Path, key: str) -> None:
    clock = FakeClock(1_790_000_000.0)
    vault = Vault.init(tmp_path / "v", key=key, clock=clock)
    write(vault, command="create", path="/memories/a.md", file_text="one\n")
    write(vault, command="str_replace", path="/memories/a.md", old_str="one", new_str="two")
    vault.set_policy(content_retention="30d", actor="ops")
    clock.now += 31 * 86400
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "view", "path": "/memories"})
    retention = tool.commands.guard.retention
    assert retention is not None  # started by the call, in the background: the call did not wait for it
    retention.join(60)
    tool.call({"command": "create", "path": "/memories/b.md", "file_text": "b\n"})
    forgets = [v for v in vault.history() if v.command == "forget"]
    assert len(forgets) == 1 and forgets[0].actor == "vaultmem-retention"
    assert vault.read("/memories/a.md") == "two\n"
    with pytest.raises(ErasedError):
        vault.read("/memories/a.md", at=vault.history()[-1].id)  # "one": written 31 days ago, replaced since


# -- stock git beside an erasure ---------------------------------------------------------


@pytest.mark.parametrize("command", [["repack", "-a", "-d", "-q"], ["gc", "--quiet", "--prune=now"]])
def test_git_maintenance_at_every_step_of_an_erasure_loses_nothing_and_keeps_no_key(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    """Stock git run at each named step of a forget (in this process, as the
    step is reached): the erasure completes, the other files are whole, git
    and verify are clean, and no copy of an erased key is left anywhere."""
    vault.close()
    template = tmp_path / "template.vault"
    shutil.copytree(vault_path, template)
    names: list[str] = []
    commits.on_step = names.append
    try:
        Vault.open(vault_path, key=key).forget("/memories/customers/a-l.md", reason="count")
    finally:
        commits.on_step = None
    assert "erase-prune" in names and "moved" in names
    for at, step in enumerate(names):
        case = shutil.copytree(template, tmp_path / f"case-{at}")
        opened = Vault.open(case, key=key)
        listed = opened.forget("/memories/customers/a-l.md", reason="r", dry_run=True).versions
        blobs = [opened.read_blob(bytes.fromhex(v.blob)) for v in listed]
        seen = [0]

        def run_git(name: str, step: str = step, case: Path = case, seen: list[int] = seen) -> None:
            if name == step and not seen[0]:
                seen[0] = 1
                subprocess.run(["git", "-C", str(case), *command], check=True, capture_output=True)

        commits.on_step = run_git
        try:
            result = opened.forget("/memories/customers/a-l.md", reason="GDPR request 4411")
        finally:
            commits.on_step = None
        assert seen[0] == 1 and len(result.versions) == 3, step
        opened.close()
        subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
        report = Vault.open(case, key=key).verify()
        assert report.ok and report.erased == 3, (step, report.problems)
        assert Vault.open(case, key=key).read("/memories/other.md") == "unrelated\n"
        assert_no_key_left(case, key, blobs)


def test_writers_in_other_processes_keep_every_write_while_an_erasure_runs(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    vault.close()
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from vaultmem import Vault, VaultMemoryTool\n"
            "tool = VaultMemoryTool(Vault.open(sys.argv[1], key=sys.argv[2]), actor='w')\n"
            "for n in range(60):\n"
            "    tool.call({'command': 'create', 'path': f'/memories/w/{n}.md', 'file_text': f'{n}\\n'})\n"
            "    print(n, flush=True)\n",
            str(vault_path),
            key,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "0"  # it is writing
    result = Vault.open(vault_path, key=key).forget_matching(MARKER, reason="GDPR request 4411")
    acknowledged = [line.strip() for line in writer.stdout]
    assert writer.wait(timeout=120) == 0
    after = Vault.open(vault_path, key=key)
    assert len(result.versions) == 4
    for n in ["0", *acknowledged]:
        assert after.read(f"/memories/w/{n}.md") == f"{n}\n"
    report = after.verify()
    assert report.ok and report.erased == 4, report.problems
    subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict"], check=True, capture_output=True)


def test_show_diff_and_log_after_an_erasure_name_it_and_never_fail(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    env = {**os.environ, "VAULTMEM_KEY": key}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["vaultmem", "--vault", str(vault_path), *args], capture_output=True, text=True, env=env)

    vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", actor="ops")
    shown = run("show", "main")
    assert shown.returncode == 0, shown.stderr
    assert "reason         GDPR request 4411" in shown.stdout
    assert shown.stdout.count("erased         ") == 3
    assert "-[this version of /memories/customers/a-l.md was erased on " in shown.stdout
    assert MARKER not in shown.stdout
    diff = run("diff", story["first"], "main")
    assert diff.returncode == 0, diff.stderr
    assert "-[this version of /memories/customers/ada.md was erased on " in diff.stdout
    assert f"+called {MARKER} today" in diff.stdout  # notes.md was not erased
    logged = json.loads(run("log", "--json").stdout)[0]
    assert logged["command"] == "forget" and logged["reason"] == "GDPR request 4411"
    assert len(logged["erased"]) == 3 and set(logged["erased"][0]) == {"version", "blob"}


def test_a_pack_another_program_keeps_is_never_touched_and_the_erasure_finishes_later(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    """git's receive-pack protects a pack it is landing with a `.keep`: an
    erasure leaves such a pack alone, says so, and a later run of the same
    erasure removes the old keys once the keep is gone."""
    vault.close()
    subprocess.run(["git", "-C", str(vault_path), "repack", "-a", "-d", "-q"], check=True)  # one pack, keyring too
    [pack] = [p for p in (vault_path / "objects" / "pack").iterdir() if p.suffix == ".pack"]
    keep = pack.with_suffix(".keep")
    keep.write_text("receive-pack 4242 on another-host\n")
    opened = Vault.open(vault_path, key=key)
    listed = opened.forget("/memories/customers/a-l.md", reason="r", dry_run=True).versions
    blobs = [opened.read_blob(bytes.fromhex(v.blob)) for v in listed]
    with pytest.raises(VaultError, match=r"another program holds a copy of the old keyring .*\.keep"):
        opened.forget("/memories/customers/a-l.md", reason="GDPR request 4411")
    assert keep.read_text() == "receive-pack 4242 on another-host\n" and pack.exists()  # untouched
    with pytest.raises(ErasedError):  # the keys in use are destroyed already
        Vault.open(vault_path, key=key).read("/memories/customers/ada.md", at=story["first"])
    with pytest.raises(VaultError, match="holds a copy"):
        Vault.open(vault_path, key=key).forget("/memories/customers/a-l.md", reason="GDPR request 4411")
    keep.unlink()  # the push landed (or the operator removed a dead program's keep)
    again = Vault.open(vault_path, key=key).forget("/memories/customers/a-l.md", reason="GDPR request 4411")
    assert again.versions == () and len(again.already) == 3
    assert_no_key_left(vault_path, key, blobs)
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok and report.erased == 3, report.problems


def test_a_dry_run_needs_no_reason_and_find_s_results_can_be_forgotten_as_listed(
    vault: Vault, vault_path: Path, key: str, story: dict[str, str]
) -> None:
    assert len(vault.forget("/memories/customers/a-l.md", dry_run=True).versions) == 3
    assert len(vault.forget_matching(MARKER, dry_run=True).versions) == 4
    with pytest.raises(VaultError, match="needs a reason"):
        vault.forget("/memories/customers/a-l.md")
    found = [m for m in vault.find(MARKER) if m.path == "/memories/notes.md"]
    assert len(found) == 1
    done = vault.forget_matching(found, reason="GDPR request 4411")
    assert [v.path for v in done.versions] == ["/memories/notes.md"]
    assert MARKER in vault.read("/memories/customers/a-l.md")  # not in the list: kept
    forged = dataclasses.replace(found[0], blob="0" * 40)
    with pytest.raises(NotFoundError):
        vault.forget_matching([forged], reason="r")
    with pytest.raises(VaultError):
        vault.forget_matching([object()], reason="r")  # type: ignore[list-item]


def test_text_that_is_not_unicode_in_a_reason_actor_session_or_pattern_is_a_vault_error(
    vault: Vault, vault_path: Path, story: dict[str, str]
) -> None:
    before = git(vault_path, "for-each-ref")
    bad = "demande de Ren\udce9"  # a lone surrogate: the byte 0xE9 of a command line or the environment
    with pytest.raises(VaultError, match="reason is not valid Unicode"):
        vault.forget("/memories/customers/a-l.md", reason=bad)
    with pytest.raises(VaultError, match="reason is not valid Unicode"):
        vault.redact(story["first"], "/memories/customers/ada.md", reason=bad)
    with pytest.raises(VaultError, match=r"actor .* is not valid Unicode"):
        vault.forget_matching(MARKER, reason="GDPR request 4411", actor=bad)
    with pytest.raises(VaultError, match=r"session .* is not valid Unicode"):
        vault.forget("/memories/customers/a-l.md", reason="GDPR request 4411", session=bad)
    deep = "(" * 2000 + "ada" + ")" * 2000
    with pytest.raises(VaultError, match="nest too deeply"):
        vault.find(deep, regex=True)
    with pytest.raises(VaultError, match="nest too deeply"):
        vault.forget_matching(deep, regex=True, reason="GDPR request 4411")
    assert git(vault_path, "for-each-ref") == before
    assert vault.find(MARKER)  # nothing was erased


@pytest.mark.parametrize("hiding", ["info/grafts", "shallow"])
def test_find_and_forget_read_past_a_grafts_or_shallow_file(
    vault: Vault, vault_path: Path, key: str, clock: FakeClock, hiding: str
) -> None:
    """git (and libgit2) honour ``info/grafts`` and ``shallow``: with one that
    cuts main's history short, a walk through libgit2 would never reach the
    older versions, and an erasure would report success while they stay
    readable.  vaultmem reads the parents each commit records."""
    write(vault, command="create", path="/memories/customers/ada.md", file_text="Ada Lovelace, card 4111\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    write(vault, command="str_replace", path="/memories/customers/ada.md", old_str="card 4111", new_str="card ----")
    write(vault, command="create", path="/memories/later.md", file_text="later\n")
    cut = git(vault_path, "rev-parse", "main~1").strip()
    (vault_path / hiding).write_text(cut + "\n")
    assert len(git(vault_path, "rev-list", "main").split()) == 2  # what git shows now
    vault.close()
    vault = Vault.open(vault_path, key=key, clock=clock)  # libgit2 reads the file when a repository opens
    [match] = vault.find("card 4111")
    assert match.path == "/memories/customers/ada.md" and not match.current
    result = vault.forget("/memories/customers/ada.md", reason="GDPR request 4412", actor="ops")
    assert len(result.versions) == 2 and result.commit is not None
    (vault_path / hiding).unlink()
    assert vault.find("card 4111") == [] and vault.find("Ada") == []
