"""The bearer token of ``vaultmem mcp --http`` (docs/mcp.md): checked and made
without the ``mcp`` package, so a bad one is refused before it loads."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path

from vaultmem.core.crypto import read_secret_file
from vaultmem.errors import BadKeyError, VaultError

ENV_TOKEN = "VAULTMEM_MCP_TOKEN"
TOKEN_FILE = "mcp-token"
TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # a bearer token (RFC 6750's b64token)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be the bearer token clients send, or None."""
    if len(token) < 32:
        return "is shorter than 32 characters"
    if not TOKEN_CHARACTERS.fullmatch(token):
        return "holds characters a bearer token cannot: use letters, digits and - . _ ~ + / (and = at the end)"
    return None


def load_or_make_token(path: Path) -> str:
    """The bearer token in ``path``; a new random one (mode 0600) if there is none."""
    if path.exists():
        token = read_secret_file(path, "token file", "token", ENV_TOKEN).strip()
        problem = token_problem(token)
        if problem is not None:
            raise BadKeyError(f"Error: the token in {path} {problem}; remove it to get a new one.")
        return token
    if path.is_symlink():  # never made through a link: it could point anywhere
        raise BadKeyError(
            f"Error: the token file {path} is a link to {os.readlink(path)}, which does not exist; "
            "put the token there, or remove the link to get a new one."
        )
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except OSError as err:
        raise VaultError(f"Error: cannot make the token file {path}: {err.strerror or err}.") from err
    data = (token + "\n").encode("ascii")
    try:
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:  # a full disk, a quota: no empty token file is left to refuse the next start
        with contextlib.suppress(OSError):
            path.unlink()
        raise VaultError(
            f"Error: cannot write the token file {path}: {err.strerror or err}; nothing was made. "
            "Free space, then start the server again."
        ) from err
    return token
