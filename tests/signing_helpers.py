"""Helpers for the signed-commit tests (test_signing.py): stock git run the
way an auditor runs it (a clean home, no system or user config), and the
commits an attacker who holds the vault key could write with stock tools:
raw commit bytes, re-sealed with the vault key, signed (or not) with any key,
stored with ``git hash-object`` and put on a branch with ``git update-ref``.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from vaultmem import SigningKey, Vault
from vaultmem.core.signing import BEGIN, END, armor, gpgsig_value, split_signature
from vaultmem.core.versions import SEAL_HEADER, split_seal

BRANCHES = ("main", "vaultmem-signers", "vaultmem-policy", "vaultmem-checkpoints")


# -- stock git, with nothing of the user's --------------------------------------------


def clean_env(home: Path) -> dict[str, str]:
    """An environment with no git config but the vault's own: a fresh HOME,
    no system config, no ssh agent."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "TZ": "UTC",
    }


def stock_git(vault_path: Path, home: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Stock git against the vault in a clean environment (never raises on failure)."""
    result = subprocess.run(
        ["git", "-C", str(vault_path), *args],
        input=stdin.decode("utf-8") if stdin is not None else None,
        capture_output=True,
        text=True,
        env=clean_env(home),
        check=False,
    )
    return result


def git_ok(vault_path: Path, home: Path, *args: str, stdin: bytes | None = None) -> str:
    result = stock_git(vault_path, home, *args, stdin=stdin)
    assert result.returncode == 0, f"git {' '.join(args)} failed ({result.returncode}): {result.stderr}"
    return result.stdout


def rev_list(vault_path: Path, home: Path, branch: str) -> list[str]:
    out = stock_git(vault_path, home, "rev-list", f"refs/heads/{branch}")
    return out.stdout.split() if out.returncode == 0 else []


def tips(vault_path: Path, home: Path) -> dict[str, str]:
    """Every ref and where it points (what "nothing changed" compares)."""
    out = git_ok(vault_path, home, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def counts(vault_path: Path, home: Path) -> dict[str, int]:
    return {branch: len(rev_list(vault_path, home, branch)) for branch in BRANCHES}


def author_of(vault_path: Path, home: Path, commit: str) -> str:
    return git_ok(vault_path, home, "show", "-s", "--format=%an", commit).strip()


def verify_commit(vault_path: Path, home: Path, commit: str) -> subprocess.CompletedProcess[str]:
    """``git verify-commit``: its verdict goes to stderr, as git prints it."""
    return stock_git(vault_path, home, "verify-commit", commit)


# -- commits as an attacker with the vault key writes them ---------------------------


def raw_commit(vault_path: Path, home: Path, rev: str) -> bytes:
    result = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "commit", rev],
        capture_output=True,
        env=clean_env(home),
        check=True,
    )
    return result.stdout


def unsealed(raw: bytes) -> bytes:
    """A commit's bytes without its seal and its signature (what the seal covers)."""
    return split_seal(raw)[0]


def edit(
    body: bytes,
    *,
    author: str | None = None,
    when: int | None = None,
    parent: str | None = None,
    tree: str | None = None,
) -> bytes:
    """An unsealed commit with some fields replaced: ``parent`` becomes its
    only parent; ``author`` its author and its ``Vaultmem-Actor`` trailer;
    ``when`` its author and committer times."""
    head, _, text = body.partition(b"\n\n")
    lines = head.split(b"\n")
    out: list[bytes] = []
    for line in lines:
        if line.startswith(b"tree "):
            out.append(b"tree " + tree.encode() if tree is not None else line)
            if parent is not None:  # the one parent, in place of any the commit had (a root commit has none)
                out.append(b"parent " + parent.encode())
            continue
        if parent is not None and line.startswith(b"parent "):
            continue
        if line.startswith((b"author ", b"committer ")):
            name, stamp, zone = line.rsplit(b" ", 2)
            if author is not None and line.startswith(b"author "):
                name = f"author {author} <{author}>".encode()
            if when is not None:
                stamp = str(when).encode()
            line = b" ".join((name, stamp, zone))
        out.append(line)
    if author is not None:
        kept = [
            f"Vaultmem-Actor: {author}" if row.startswith("Vaultmem-Actor: ") else row
            for row in text.decode("utf-8").split("\n")
        ]
        text = "\n".join(kept).encode("utf-8")
    return b"\n".join(out) + b"\n\n" + text


def _with_header(body: bytes, name: bytes, value: bytes, *, after_committer: bool) -> bytes:
    head, _, text = body.partition(b"\n\n")
    lines = head.split(b"\n")
    if after_committer:
        at = next(i for i, line in enumerate(lines) if line.startswith(b"committer ")) + 1
    else:
        at = len(lines)
    lines.insert(at, name + b" " + value)
    return b"\n".join(lines) + b"\n\n" + text


def seal(vault: Vault, body: bytes) -> bytes:
    """The seal header vaultmem writes, made with the vault key (after the committer)."""
    return _with_header(body, SEAL_HEADER, vault.keyring.seal_commit(body), after_committer=True)


def add_signature(sealed: bytes, armored: bytes) -> bytes:
    """``gpgsig`` last among the headers, as ``git commit -S`` writes it."""
    return _with_header(sealed, b"gpgsig", gpgsig_value(armored), after_committer=False)


def sign(sealed: bytes, key: SigningKey) -> bytes:
    return add_signature(sealed, key.sign(sealed))


def forge(vault: Vault, body: bytes, key: SigningKey | None) -> bytes:
    """An unsealed commit, sealed with the vault key and signed by ``key`` (None: unsigned)."""
    sealed = seal(vault, body)
    return sign(sealed, key) if key is not None else sealed


def signature_of(raw: bytes) -> bytes:
    armored = split_signature(raw)[1]
    assert armored is not None, "the commit carries no signature"
    return armored


def corrupt(armored: bytes) -> bytes:
    """The same SSH signature with one bit of its ed25519 signature flipped
    (it still parses; it no longer verifies)."""
    lines = armored.strip().split(b"\n")
    assert lines[0] == BEGIN and lines[-1] == END
    blob = bytearray(base64.b64decode(b"".join(lines[1:-1])))
    blob[-10] ^= 0x01  # inside the 64 signature bytes, which end the blob
    return armor(bytes(blob))


def store(vault_path: Path, home: Path, raw: bytes) -> str:
    """``git hash-object -t commit -w --stdin``: the commit's id."""
    return git_ok(vault_path, home, "hash-object", "-t", "commit", "-w", "--stdin", stdin=raw).strip()


def move(vault_path: Path, home: Path, branch: str, new: str, old: str) -> None:
    git_ok(vault_path, home, "update-ref", f"refs/heads/{branch}", new, old)


def put(vault_path: Path, home: Path, raw: bytes, branch: str = "main") -> str:
    """Store ``raw`` and move the branch from its tip onto it (the tip is its
    parent to append a commit, or shares its parent to replace the tip)."""
    old = git_ok(vault_path, home, "rev-parse", f"refs/heads/{branch}").strip()
    new = store(vault_path, home, raw)
    move(vault_path, home, branch, new, old)
    return new


def store_tree(vault_path: Path, home: Path, files: Sequence[tuple[str, bytes]]) -> str:
    """A tree of plain files, as ``git hash-object -w`` and ``git mktree`` make it."""
    listing = ""
    for name, data in files:
        blob = git_ok(vault_path, home, "hash-object", "-w", "--stdin", stdin=data).strip()
        listing += f"100644 blob {blob}\t{name}\n"
    return git_ok(vault_path, home, "mktree", stdin=listing.encode()).strip()
