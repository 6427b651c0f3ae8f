"""No key of an erased version at rest, through sync: a pull that meets an
erasure (another clone's, or its own not pushed yet) keeps the right keyring,
leaves no old keyring behind and reports the server as it is."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_erasure import assert_no_key_left
from test_erasure_sync import bare, cli, two_clones

from vaultmem import generate_key


def _ref(vault: Path, name: str) -> str:
    return subprocess.run(
        ["git", "-C", str(vault), "rev-parse", "--verify", "-q", name], capture_output=True, text=True
    ).stdout.strip()


def test_pulling_an_erasure_keeps_tracking_the_remote_keyring_and_says_nothing_false(tmp_path: Path) -> None:
    key = generate_key()
    server = bare(tmp_path / "srv.git")
    first, second = two_clones(tmp_path, str(server), key)
    first.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    first.push()
    new_keyring = _ref(server, "refs/heads/vaultmem-keyring")
    second.close()

    pulled = cli(second.path, key, "pull", "origin")

    assert pulled.returncode == 0, pulled.stderr
    assert "Pulled vaultmem-keyring:" in pulled.stdout
    assert "has no vaultmem-keyring" not in pulled.stdout, pulled.stdout
    assert _ref(second.path, "refs/heads/vaultmem-keyring") == new_keyring
    assert _ref(second.path, "refs/remotes/origin/vaultmem-keyring") == new_keyring
    again = cli(second.path, key, "pull", "origin")
    assert again.stdout.strip() == "Pulled: nothing to move; origin and this vault agree.", again.stdout


def test_sync_right_after_an_erasure_keeps_the_erasure_keyring_and_says_nothing_false(tmp_path: Path) -> None:
    key = generate_key()
    server = bare(tmp_path / "srv.git")
    first, second = two_clones(tmp_path, str(server), key)
    second.close()
    found = first.forget("/memories/ada.md", reason="GDPR request 4411", dry_run=True).versions
    blobs = [first.read_blob(bytes.fromhex(v.blob)) for v in found]
    first.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    erased_ring = _ref(first.path, "refs/heads/vaultmem-keyring")
    first.close()

    pulled = cli(first.path, key, "pull", "origin")  # the server still holds the keyring from before

    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.splitlines() == [
        "Pulled: nothing new on origin.",
        "This vault holds versions of main and vaultmem-keyring that origin lacks; the next push sends them.",
    ], pulled.stdout
    assert _ref(first.path, "refs/heads/vaultmem-keyring") == erased_ring  # no needless merge of keyrings
    assert_no_key_left(first.path, key, blobs)  # the old keyring the fetch brought back is gone again
    synced = cli(first.path, key, "sync", "origin")
    assert synced.returncode == 0, synced.stderr
    assert "has no vaultmem-keyring" not in synced.stdout, synced.stdout
    assert _ref(server, "refs/heads/vaultmem-keyring") == erased_ring
    assert cli(first.path, key, "verify").returncode == 0
    taken = cli(second.path, key, "pull", "origin")
    assert taken.returncode == 0, taken.stderr
    assert _ref(second.path, "refs/heads/vaultmem-keyring") == erased_ring
    for folder in (first.path, server, second.path):
        assert_no_key_left(folder, key, blobs)
