"""An ssh server for the tests: OpenSSH's sshd on 127.0.0.1 with generated
host and user keys, serving git over ssh as root's own account."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass(frozen=True)
class SSHServer:
    port: int
    user_key: Path  # the private key that logs in
    known_hosts: str  # the line for ~/.ssh/known_hosts


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def sshd(folder: Path) -> Iterator[SSHServer]:
    folder.mkdir(parents=True)
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\nStrictModes no\n"
        "PermitRootLogin prohibit-password\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"sshd did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.05)
        host_key = " ".join((folder / "host_key.pub").read_text().split()[:2])
        yield SSHServer(port, folder / "user_key", f"[127.0.0.1]:{port} {host_key}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
