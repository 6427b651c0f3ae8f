"""The git-backed vault as the layers above use it: :class:`Store` is the
engine (:mod:`vaultmem.repo.engine`) with its parts, key destruction
(:mod:`.shredding`), migrations (:mod:`.migration`), sharing
(:mod:`.syncing`), and signers (:mod:`.signing`).  ``vaultmem.vault.Vault`` adds the verbs of
:mod:`vaultmem.ops` on top."""

from __future__ import annotations

from vaultmem.repo.engine import MAIN, Change, Clock, Engine, Entry
from vaultmem.repo.keys import KEYRING_REF
from vaultmem.repo.migration import Migration
from vaultmem.repo.signing import Signing
from vaultmem.repo.syncing import Syncing

__all__ = ["KEYRING_REF", "MAIN", "Change", "Clock", "Engine", "Entry", "Store"]


class Store(Syncing, Migration, Signing):
    """An encrypted, versioned memory store in a bare git repository: the
    engine, key destruction, migrations, sharing and signers."""
