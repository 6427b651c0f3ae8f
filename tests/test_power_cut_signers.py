"""After a power cut that came once a signer change's record was durable in
the journal but before its ref moved, the first write rolls the change
forward (docs/format.md, "A power cut"): a vault opened read-only before any
write reads the signers list as the journal replays it too, as it reads
main, the keyring and the policy, so what it shows is what the first write
then keeps."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FakeClock

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.git import commits, upkeep


def test_a_signer_change_whose_record_was_durable_is_read_as_the_first_write_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    path, image = tmp_path / "v", tmp_path / "image"
    monkeypatch.setattr(upkeep.Upkeep, "poke", lambda self: None)  # a power cut stops the upkeep too
    vault = Vault.init(path, key=key, clock=FakeClock())
    ops, alice = SigningKey.generate(), SigningKey.generate()
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)

    def cut_power(step: str) -> None:  # the disk as it is when the record is durable and the ref not moved
        if step == "durable" and not image.exists():
            shutil.copytree(path, image, symlinks=True)

    monkeypatch.setattr(commits, "on_step", cut_power)
    vault.add_signer("alice", alice.public, actor="ops")
    monkeypatch.setattr(commits, "on_step", None)
    vault.close()
    monkeypatch.setattr(commits, "epoch", lambda gitdir: b"after a power cut")
    ref = image / "refs" / "heads" / "vaultmem-signers"
    on_disk = ref.read_bytes()
    reader = Vault.open(image, key=key)
    assert sorted(s.principal for s in reader.signers.entries) == ["alice", "ops"]
    assert ref.read_bytes() == on_disk  # reading repaired nothing: a read never writes
    writer = Vault.open(image, key=key)
    writer.sign_as("ops", ops)
    VaultMemoryTool(writer, actor="ops").call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    assert sorted(s.principal for s in writer.signers.entries) == ["alice", "ops"]
    assert sorted(s.principal for s in reader.signers.entries) == ["alice", "ops"]
