"""Git's storage, written by vaultmem: objects and packs, trees, refs and the
one commit path, locks, the journal, and the upkeep after the calls."""
