"""``VAULTMEM_SSH_KEY`` names the private key file that logs in over ssh.
When it names no readable file, or holds the key's text instead of its
path, the error says so and names the variable, never showing the key, and
nothing is made."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest
from sshserver import SSHD, sshd
from test_sync import pushed

from vaultmem import Vault
from vaultmem.errors import VaultError

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD), reason="OpenSSH's sshd is not installed (.ci/run installs it)"
)


@pytest.mark.parametrize("given", ["missing-file", "key-text"])
def test_an_ssh_key_variable_naming_no_key_file_is_said_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    remote, key, first = pushed(tmp_path)
    first.close()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(pygit2.settings, "homedir", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with sshd(tmp_path / "sshd") as server:
        (home / ".ssh" / "known_hosts").write_text(server.known_hosts + "\n")
        text = server.user_key.read_text()
        named = str(tmp_path / "keys" / "id_ed25519") if given == "missing-file" else text
        monkeypatch.setenv("VAULTMEM_SSH_KEY", named)
        url = f"ssh://root@127.0.0.1:{server.port}{remote}"
        with pytest.raises(VaultError) as refused:
            Vault.clone(url, tmp_path / "second.vault", key=key)
        said = str(refused.value)
        assert "VAULTMEM_SSH_KEY" in said, said
        body = "".join(text.splitlines()[1:-1])
        assert body[:40] not in said and "PRIVATE KEY" not in said, said
        if given == "missing-file":
            assert named in said and "no such file" in said, said
        else:
            assert "holds a key's text" in said, said
        assert "\n" not in said
        assert not (tmp_path / "second.vault").exists()
