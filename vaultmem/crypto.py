"""Keys and encrypted blobs.  Knows nothing about git or Claude.

Two levels of keys, like LUKS: file contents are encrypted with random *data
keys*; the data keys are stored *wrapped* (Fernet-encrypted) by the user's key in
a keyring document.  Changing the user's key rewraps the keyring only.

A stored file version is one blob::

    vaultmem-blob 1 <data-key-id> <plaintext-length>\\n<Fernet token>

What the token authenticates is ``path NUL content``, so a blob copied to another
path, or a header whose length was edited, fails to open.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from .errors import BadKeyError, IntegrityError, NotAVaultError, WrongKeyError

FORMAT_VERSION = 1
BLOB_MAGIC = b"vaultmem-blob"
ENV_KEY = "VAULTMEM_KEY"

# scrypt cost for passphrases: 2**15 * 8 * 128 bytes = 32 MiB and ~0.1 s per open.
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1


def generate_key() -> str:
    """A new random user key, as the string ``key=`` and ``VAULTMEM_KEY`` take."""
    return Fernet.generate_key().decode("ascii")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))


@dataclass(frozen=True)
class UserKey:
    """The key that wraps the data keys.  Validated once, here."""

    fernet: Fernet = field(repr=False)
    source: str = "key"

    @classmethod
    def from_string(cls, key: str, source: str = "key") -> UserKey:
        if not isinstance(key, str):
            raise BadKeyError("Error: the key must be a string from `vaultmem keygen` or generate_key().")
        try:
            raw = base64.urlsafe_b64decode(key.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raw = b""
        if len(raw) != 32:
            raise BadKeyError(
                f"Error: the {source} is not a vaultmem key (expected the 44-character string that "
                "`vaultmem keygen` prints); for a passphrase use passphrase= instead."
            )
        return cls(Fernet(base64.urlsafe_b64encode(raw)), source)

    @classmethod
    def from_passphrase(cls, passphrase: str, kdf: Mapping[str, Any]) -> UserKey:
        if not isinstance(passphrase, str) or not passphrase:
            raise BadKeyError("Error: the passphrase must be a non-empty string.")
        try:
            scrypt = Scrypt(salt=_unb64(kdf["salt"]), length=32, n=int(kdf["n"]), r=int(kdf["r"]), p=int(kdf["p"]))
        except (KeyError, ValueError, TypeError) as err:
            raise NotAVaultError("Error: the vault's keyring has malformed passphrase settings.") from err
        raw = scrypt.derive(passphrase.encode("utf-8"))
        return cls(Fernet(base64.urlsafe_b64encode(raw)), "passphrase")


def new_kdf_params() -> dict[str, Any]:
    return {"kdf": "scrypt", "salt": _b64(secrets.token_bytes(16)), "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}


def read_key_file(path: str | os.PathLike[str]) -> UserKey:
    """Load a user key from a file, refusing one that others could read."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise BadKeyError(f"Error: cannot read the key file: {err.strerror}.") from err
    if not stat.S_ISREG(st.st_mode):
        raise BadKeyError("Error: the key file is not a regular file.")
    if st.st_mode & 0o077:
        raise BadKeyError(
            f"Error: the key file is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "run `chmod 600` on it first."
        )
    with open(path, encoding="ascii", errors="replace") as fh:
        return UserKey.from_string(fh.read(), source="key file")


def key_from_environment(environ: Mapping[str, str] | None = None) -> UserKey | None:
    env = os.environ if environ is None else environ
    value = env.get(ENV_KEY)
    if not value:
        return None
    return UserKey.from_string(value, source=f"{ENV_KEY} environment variable")


@dataclass(frozen=True)
class DataKey:
    id: str
    fernet: Fernet = field(repr=False)


class Keyring:
    """The unwrapped data keys of a vault, and the document they are stored in."""

    def __init__(self, doc: dict[str, Any], keys: dict[str, DataKey]) -> None:
        self.doc = doc
        self.keys = keys

    @property
    def active(self) -> DataKey:
        return self.keys[self.doc["active"]]

    @property
    def protector(self) -> dict[str, Any]:
        protector: dict[str, Any] = self.doc["protector"]
        return protector

    @classmethod
    def create(cls, user_key: UserKey, protector: dict[str, Any], now: int) -> Keyring:
        doc: dict[str, Any] = {
            "vaultmem_format": FORMAT_VERSION,
            "protector": protector,
            "data_keys": [],
            "active": None,
        }
        ring = cls(doc, {})
        ring.add_data_key(user_key, now)
        return ring

    def add_data_key(self, user_key: UserKey, now: int) -> DataKey:
        raw = Fernet.generate_key()
        key = DataKey(secrets.token_hex(8), Fernet(raw))
        wrapped = user_key.fernet.encrypt_at_time(raw, now).decode("ascii")
        self.doc["data_keys"].append({"id": key.id, "wrapped": wrapped, "created": now})
        self.doc["active"] = key.id
        self.keys[key.id] = key
        return key

    @staticmethod
    def parse(data: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise NotAVaultError("Error: the vault's keyring is not readable; the folder is damaged.") from err
        if not isinstance(doc, dict) or "vaultmem_format" not in doc:
            raise NotAVaultError("Error: the vault's keyring is not readable; the folder is damaged.")
        if doc["vaultmem_format"] != FORMAT_VERSION:
            raise NotAVaultError(
                f"Error: this vault uses storage format {doc['vaultmem_format']!r}; this vaultmem reads "
                f"format {FORMAT_VERSION}. Upgrade vaultmem to open it."
            )
        return doc

    @classmethod
    def unlock(cls, doc: dict[str, Any], user_key: UserKey) -> Keyring:
        keys: dict[str, DataKey] = {}
        try:
            entries = list(doc["data_keys"])
            for entry in entries:
                raw = user_key.fernet.decrypt(entry["wrapped"].encode("ascii"))
                keys[entry["id"]] = DataKey(entry["id"], Fernet(raw))
            if doc["active"] not in keys:
                raise NotAVaultError("Error: the vault's keyring names no usable active data key.")
        except InvalidToken as err:
            raise WrongKeyError(f"Error: the {user_key.source} given does not open this vault.") from err
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise NotAVaultError("Error: the vault's keyring is malformed; the folder is damaged.") from err
        return cls(doc, keys)

    def to_bytes(self) -> bytes:
        return (json.dumps(self.doc, indent=2, sort_keys=True) + "\n").encode("utf-8")

    # -- blobs -------------------------------------------------------------

    def seal(self, path: str, content: bytes, now: int) -> bytes:
        """Encrypt one file version for ``path`` (canonical text)."""
        key = self.active
        token = key.fernet.encrypt_at_time(path.encode("utf-8") + b"\0" + content, now)
        return b"%s %d %s %d\n" % (BLOB_MAGIC, FORMAT_VERSION, key.id.encode("ascii"), len(content)) + token

    def open(self, path: str, blob: bytes) -> bytes:
        """Decrypt a blob written for ``path``; any doubt is an IntegrityError."""
        key_id, length, token = _split_blob(blob)
        key = self.keys.get(key_id)
        bad = IntegrityError(f"Error: the stored version of {path} failed authentication; run `vaultmem verify`.")
        if key is None:
            raise bad
        try:
            payload = key.fernet.decrypt(token)
        except InvalidToken as err:
            raise bad from err
        bound, sep, content = payload.partition(b"\0")
        if not sep or bound != path.encode("utf-8") or len(content) != length:
            raise bad
        return content


def _split_blob(blob: bytes) -> tuple[str, int, bytes]:
    header, sep, token = blob.partition(b"\n")
    fields = header.split(b" ")
    if not sep or len(fields) != 4 or fields[0] != BLOB_MAGIC or fields[1] != b"%d" % FORMAT_VERSION:
        raise IntegrityError("Error: a stored blob is not in vaultmem format; run `vaultmem verify`.")
    try:
        return fields[2].decode("ascii"), int(fields[3]), token
    except (UnicodeDecodeError, ValueError) as err:
        raise IntegrityError("Error: a stored blob has a malformed header; run `vaultmem verify`.") from err


def plaintext_size(blob: bytes) -> int:
    """The plaintext length a blob's header declares (no key needed)."""
    return _split_blob(blob[:128])[1] if b"\n" in blob[:128] else _split_blob(blob)[1]
