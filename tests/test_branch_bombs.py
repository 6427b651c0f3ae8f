"""A zlib bomb (an object whose header declares gigabytes) put on one of the
vault's own branches by someone with write access: the keyring, the policy
and the signers list are read with every object's size checked first, so the
open refuses clearly instead of allocating gigabytes."""

from __future__ import annotations

import zlib
from hashlib import sha1
from pathlib import Path

import pytest

from vaultmem import Vault, VaultError, generate_key
from vaultmem.git import objects


def loose_bomb(vault: Path, kind: str) -> str:
    """A loose object declaring 1 GiB over a few bytes of data (its id is of
    the header and the bytes given, not of a real gigabyte)."""
    size = objects.MAX_OBJECT_BYTES + 1
    raw = f"{kind} {size}\0".encode() + b"x" * 64
    oid = sha1(raw).hexdigest()
    folder = vault / "objects" / oid[:2]
    folder.mkdir(exist_ok=True)
    (folder / oid[2:]).write_bytes(zlib.compress(raw))
    return oid


@pytest.mark.parametrize("branch", ["vaultmem-keyring", "vaultmem-policy"])
def test_a_bomb_on_a_branch_of_the_vault_is_refused_unread(tmp_path: Path, branch: str) -> None:
    key = generate_key()
    path = tmp_path / "v"
    vault = Vault.init(path, key=key)
    vault.set_policy(actor="ops", max_files=10)
    vault.close()
    bomb = loose_bomb(path, "commit")
    (path / "refs" / "heads" / branch).write_text(bomb + "\n")  # as a hand would: git refuses to
    with pytest.raises(VaultError) as err:
        opened = Vault.open(path, key=key)
        opened.policy  # noqa: B018 (reading it is the test)
    assert f"declares {objects.MAX_OBJECT_BYTES + 1:,} bytes" in str(err.value), err.value
