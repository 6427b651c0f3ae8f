"""A vault whose files someone changed without the key (an attacker with
write access, a bad sync tool): its ``main`` moved to a blob, a tree or an
annotated tag; trees holding names git forbids (``..``, ``x/y``, bytes that
are not UTF-8, a 64 KB name); a tree nested 10,000 folders deep; a garbage
``packed-refs``.

Every read gives the exact stored memory or a clear vaultmem error naming
the problem (a ``ToolError`` through the tool, ``IntegrityError`` through
the API, one line from the CLI), never a ``ValueError``, ``UnicodeDecodeError``
or ``RecursionError``; ``verify()`` reports each problem as a finding.  Each
read runs in its own process, bounded in time and memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key

MEMORY_LIMIT = 2 << 30  # bytes of address space for each read
TIME_LIMIT = 60  # seconds, far above what each read takes (well under one)


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


_READS = textwrap.dedent(
    """
    import json, sys
    from vaultmem import Vault, VaultMemoryTool
    path, key, ops = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    vault = Vault.open(path, key=key)
    tool = VaultMemoryTool(vault, actor="auditor", session="check")
    out = []
    for op, arg in ops:
        try:
            if op == "view":
                got = tool.call({"command": "view", "path": arg})
            elif op == "read":
                got = vault.read(arg)
            elif op == "history":
                got = [v.id for v in vault.history()]
            elif op == "verify":
                got = vault.verify().problems
            out.append(["ok", got])
        except Exception as err:
            out.append([type(err).__name__, str(getattr(err, "content", None) or err)])
    print(json.dumps(out))
    """
)


def reads(vault_path: Path, key: str, *ops: tuple[str, str]) -> list[tuple[str, Any]]:
    """Run ``ops`` (``("view", path)``, ``("read", path)``, ``("verify", "")``)
    on a fresh open of the vault in a bounded process: ``(outcome, value)``
    each, the outcome "ok" or the exception's class name."""
    done = subprocess.run(
        [sys.executable, "-c", _READS, str(vault_path), key, json.dumps(ops)],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        preexec_fn=_bounded,
    )
    assert done.returncode == 0, done.stderr
    return [tuple(item) for item in json.loads(done.stdout)]


def cli(vault_path: Path, key_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "--key-file", str(key_file), *args],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        preexec_fn=_bounded,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert "unexpected" not in done.stderr, done.stderr
    return done


def git(vault_path: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(vault_path), *args], input=data, capture_output=True, check=True)
    return done.stdout.decode().strip()


def write_object(vault_path: Path, kind: str, data: bytes) -> str:
    """An object as someone without the key writes it (git checks nothing)."""
    return git(vault_path, "hash-object", "--literally", "-t", kind, "-w", "--stdin", data=data)


def write_loose(vault_path: Path, kind: bytes, data: bytes) -> str:
    """What :func:`write_object` does, without a git process."""
    raw = kind + b" %d\0" % len(data) + data
    oid = hashlib.sha1(raw).hexdigest()
    folder = vault_path / "objects" / oid[:2]
    folder.mkdir(exist_ok=True)
    (folder / oid[2:]).write_bytes(zlib.compress(raw, 1))
    return oid


def write_tree(vault_path: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree of ``(octal mode, name, hex id)`` entries, in the order given."""
    raw = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)
    return write_object(vault_path, "tree", raw)


def tree_entries(vault_path: Path, treeish: str) -> list[tuple[str, bytes, str]]:
    out = []
    for line in git(vault_path, "ls-tree", treeish).splitlines():
        meta, name = line.split("\t")
        mode, _, oid = meta.split(" ")
        out.append((mode.lstrip("0"), name.encode(), oid))
    return out


def move_main(vault_path: Path, oid: str) -> None:
    """Point main anywhere, as an editor would (``git update-ref`` refuses a non-commit)."""
    (vault_path / "refs" / "heads" / "main").write_text(oid + "\n")


def commit_memories(vault_path: Path, memories: list[tuple[str, bytes, str]]) -> str:
    """A new head whose memories/ tree holds ``memories`` (in git's order unless given otherwise)."""
    root = [
        (m, n, write_tree(vault_path, memories) if n == b"memories" else o)
        for m, n, o in tree_entries(vault_path, "main^{tree}")
    ]
    head = git(vault_path, "rev-parse", "main")
    message = (
        b"memory: create /memories/a.txt\n\n"
        b"Vaultmem-Command: create\nVaultmem-Path: /memories/a.txt\nVaultmem-Actor: bot\n"
    )
    raw = (
        b"tree " + write_tree(vault_path, root).encode() + b"\nparent " + head.encode() + b"\n"
        b"author bot <bot@x> 1790000000 +0000\ncommitter vaultmem <v@x> 1790000000 +0000\n\n" + message
    )
    commit = write_object(vault_path, "commit", raw)
    move_main(vault_path, commit)
    return commit


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, str, Path]:
    """A vault holding /memories/a.txt, /memories/d/b.txt and /memories/x/y, and its key file."""
    vault_path = tmp_path / "agent.vault"
    key = generate_key()
    key_file = tmp_path / "vault.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    tool = VaultMemoryTool(Vault.init(vault_path, key=key), actor="support-bot", session="s1")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "hello\nworld\n"})
    tool.call({"command": "create", "path": "/memories/d/b.txt", "file_text": "bee\n"})
    tool.call({"command": "create", "path": "/memories/x/y", "file_text": "why\n"})
    return vault_path, key, key_file


# -- main moved to an object that is not a commit --------------------------------


@pytest.mark.parametrize("kind", ["blob", "tree", "tag"])
def test_main_naming_a_blob_a_tree_or_a_tag_is_a_clear_error(seeded: tuple[Path, str, Path], kind: str) -> None:
    vault_path, key, key_file = seeded
    head = git(vault_path, "rev-parse", "main")
    target = {
        "blob": git(vault_path, "rev-parse", "main:memories/a.txt"),
        "tree": git(vault_path, "rev-parse", "main^{tree}"),
        "tag": write_object(
            vault_path, "tag", f"object {head}\ntype commit\ntag v1\ntagger x <x> 1790000000 +0000\n\nv1\n".encode()
        ),
    }[kind]
    move_main(vault_path, target)
    view, read, verify = reads(vault_path, key, ("view", "/memories"), ("read", "/memories/a.txt"), ("verify", ""))
    assert view[0] == "ToolError" and target in view[1] and "is no commit naming a tree" in view[1], view
    assert read[0] == "IntegrityError" and target in read[1] and "vaultmem verify" in read[1], read
    assert verify[0] == "ok" and any(f"is a {kind}, not a commit" in p for p in verify[1]), verify
    for args in (["cat", "/memories/a.txt"], ["export", str(vault_path.parent / "out")]):
        done = cli(vault_path, key_file, *args)
        assert done.returncode == 2 and "is no commit naming a tree" in done.stderr, (args, done.stderr)
    assert not (vault_path.parent / "out" / "memories").exists()


# -- tree entries no memory path may hold ------------------------------------------


@pytest.mark.parametrize(
    "name",
    [b"\xff\xfe.txt", b"x/y", b"..", b".", b"n" * 65536],
    ids=["not-utf8", "slash", "dotdot", "dot", "64KB"],
)
def test_a_tree_entry_no_memory_path_may_hold(seeded: tuple[Path, str, Path], name: bytes) -> None:
    """The entry points at the real blob of /memories/x/y, which authenticates
    at that path: only the name shows the tree was not written by vaultmem."""
    vault_path, key, key_file = seeded
    blob = git(vault_path, "rev-parse", "main:memories/x/y")
    memories = tree_entries(vault_path, "main:memories")
    commit_memories(vault_path, sorted([*memories, ("100644", name, blob)], key=lambda e: e[1]))
    view, read, verify = reads(vault_path, key, ("view", "/memories"), ("read", "/memories/a.txt"), ("verify", ""))
    assert view[0] == "ToolError", view
    assert "/memories holds an entry named" in view[1] and "which no memory path may hold" in view[1], view
    assert len(view[1]) < 400, view  # a 64 KB name is not repeated whole
    assert read == ("ok", "hello\nworld\n")  # the rest of the memory reads exactly as stored
    assert verify[0] == "ok"
    assert any(p.startswith("tree: ") and "is not a name a memory path may have" in p for p in verify[1]), verify
    done = cli(vault_path, key_file, "ls")
    assert done.returncode == 2 and "which no memory path may hold" in done.stderr


# -- folders nested deeper than any memory path ----------------------------------


def test_a_tree_nested_ten_thousand_folders_deep(seeded: tuple[Path, str, Path]) -> None:
    vault_path, key, key_file = seeded
    blob = git(vault_path, "rev-parse", "main:memories/a.txt")
    tree = write_tree(vault_path, [("100644", b"f", blob)])
    for _ in range(10_000):  # as loose objects, written here: a git process per tree would take minutes
        tree = write_loose(vault_path, b"tree", b"40000 x\0" + bytes.fromhex(tree))
    memories = tree_entries(vault_path, "main:memories")
    commit_memories(vault_path, sorted([*memories, ("40000", b"deep", tree)], key=lambda e: e[1]))
    deeper = "nests folders deeper than any memory path can"
    view, read, verify = reads(vault_path, key, ("view", "/memories"), ("read", "/memories/a.txt"), ("verify", ""))
    assert view[0] == "ToolError" and deeper in view[1], view
    assert read == ("ok", "hello\nworld\n")
    assert verify[0] == "ok" and any("folders nest deeper than any memory path can" in p for p in verify[1]), verify
    for args in (["show", "main"], ["export", str(vault_path.parent / "out")]):
        done = cli(vault_path, key_file, *args)
        assert done.returncode == 2 and deeper in done.stderr, (args, done.stderr)


def test_the_deepest_path_a_memory_may_have_still_reads(tmp_path: Path) -> None:
    """507 folders below /memories (a 1,024-byte path): within the bound."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    tool = VaultMemoryTool(vault, actor="bot", session="s")
    deepest = "/memories" + "/x" * 506 + "/f"
    assert len(deepest.encode()) <= 1024
    tool.call({"command": "create", "path": deepest, "file_text": "deep\n"})
    tool.call({"command": "create", "path": "/memories/top.txt", "file_text": "top\n"})
    view, read, verify = reads(tmp_path / "v", key, ("view", "/memories"), ("read", deepest), ("verify", ""))
    assert view[0] == "ok" and "5B\t/memories/x/" in view[1], view
    assert read == ("ok", "deep\n")
    assert verify == ("ok", [])
    key_file = tmp_path / "k"
    key_file.write_text(key)
    key_file.chmod(0o600)
    done = cli(tmp_path / "v", key_file, "export", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / deepest.lstrip("/")).read_text() == "deep\n"
    done = cli(tmp_path / "v", key_file, "show", "main~1")
    assert done.returncode == 0 and "+deep" in done.stdout, done.stderr


# -- a packed-refs file that is not one --------------------------------------------


def test_verify_reports_a_garbage_packed_refs_file(seeded: tuple[Path, str, Path]) -> None:
    """Every ref is loose; packed-refs holds random bytes (a bad sync tool)."""
    vault_path, key, key_file = seeded
    (vault_path / "packed-refs").write_bytes(os.urandom(4096).replace(b"\n", b"-") + b"\n")
    view, verify = reads(vault_path, key, ("view", "/memories/a.txt"), ("verify", ""))
    assert view[0] == "ok" and "world" in view[1]
    assert verify[0] == "ok" and any("packed references" in p for p in verify[1]), verify
    done = cli(vault_path, key_file, "verify")
    assert done.returncode == 1 and "packed references" in done.stdout + done.stderr
    for at in ("main", "HEAD"):  # libgit2 reads packed-refs to find main, and the signers branch
        done = cli(vault_path, key_file, "show", at)
        assert done.returncode == 2 and "packed references" in done.stderr and "no version" not in done.stderr


# -- a version git cannot parse ---------------------------------------------------


def test_a_version_git_cannot_parse_is_not_called_missing(seeded: tuple[Path, str, Path]) -> None:
    """An author date of 20 digits (git fsck: badDateOverflow): libgit2 refuses
    the commit, and ``show`` says so instead of "no version 'main'"."""
    vault_path, _, key_file = seeded
    head = git(vault_path, "rev-parse", "main")
    raw = (
        f"tree {git(vault_path, 'rev-parse', 'main^{tree}')}\nparent {head}\n"
        "author bot <bot@x> 99999999999999999999 +0000\ncommitter vaultmem <v@x> 99999999999999999999 +0000\n\n"
        "memory: create /memories/a.txt\n"
    ).encode()
    move_main(vault_path, write_object(vault_path, "commit", raw))
    for at in ("main", "main~1"):
        done = cli(vault_path, key_file, "show", at)
        assert done.returncode == 2 and "git cannot read" in done.stderr and "failed to parse" in done.stderr, (
            done.stderr
        )
    done = cli(vault_path, key_file, "show", head)  # the version before it, by id: as stored
    assert done.returncode == 0 and "+why" in done.stdout, done.stderr
    assert cli(vault_path, key_file, "show", "nope").stderr.startswith("vaultmem: no version 'nope'")
