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
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from vaultmem.errors import BadKeyError, IntegrityError, NotAVaultError, WrongKeyError

FORMAT_VERSION = 1
BLOB_MAGIC = b"vaultmem-blob"
ENV_KEY = "VAULTMEM_KEY"
_SEAL_PREFIX = b"vaultmem-seal 1\0"

# scrypt cost for passphrases: 2**15 * 8 * 128 bytes = 32 MiB and ~0.1 s per open.
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1


def generate_key() -> str:
    """A new random user key, as the string ``key=`` and ``VAULTMEM_KEY`` take."""
    return Fernet.generate_key().decode("ascii")


def _derive(secret: bytes, purpose: bytes) -> bytes:
    """A subkey for one purpose, so no key is ever used for two things."""
    return hmac.new(secret, purpose, hashlib.sha256).digest()


def _mac(key: bytes, data: bytes) -> str:
    return _b64(hmac.new(key, data, hashlib.sha256).digest()).rstrip("=")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))


@dataclass(frozen=True)
class UserKey:
    """The key that wraps the data keys.  Validated once, here."""

    fernet: Fernet = field(repr=False)
    source: str = "key"
    mac_key: bytes = field(default=b"", repr=False)  # authenticates the keyring document

    @classmethod
    def from_string(cls, key: str, source: str = "key") -> UserKey:
        if not isinstance(key, str):
            raise BadKeyError("Error: the key must be a string, such as `vaultmem keygen` prints.")
        try:
            raw = base64.urlsafe_b64decode(key.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raw = b""
        if len(raw) != 32:
            raise BadKeyError(
                f"Error: the {source} is not a vaultmem key (expected the 44-character string that "
                "`vaultmem keygen` prints).",
                step="is-passphrase",
            )
        return cls(Fernet(base64.urlsafe_b64encode(raw)), source, _derive(raw, b"vaultmem keyring mac 1"))

    @classmethod
    def from_passphrase(cls, passphrase: str, kdf: Mapping[str, Any]) -> UserKey:
        if not isinstance(passphrase, str) or not passphrase:
            raise BadKeyError("Error: the passphrase must be a non-empty string.")
        try:
            scrypt = Scrypt(salt=_unb64(kdf["salt"]), length=32, n=int(kdf["n"]), r=int(kdf["r"]), p=int(kdf["p"]))
        except (KeyError, ValueError, TypeError) as err:
            raise NotAVaultError("Error: the vault's keyring has malformed passphrase settings.") from err
        raw = scrypt.derive(passphrase.encode("utf-8"))
        return cls(Fernet(base64.urlsafe_b64encode(raw)), "passphrase", _derive(raw, b"vaultmem keyring mac 1"))


def new_kdf_params() -> dict[str, Any]:
    return {"kdf": "scrypt", "salt": _b64(secrets.token_bytes(16)), "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}


# The rule a new passphrase meets (``check_new_passphrase``).  A vault's
# passphrase guards every memory it will ever hold, and scrypt slows a
# guesser down but cannot save a short or repetitive one.
PASSPHRASE_MIN_LENGTH = 12
PASSPHRASE_MIN_DIFFERENT = 6


def check_new_passphrase(passphrase: object) -> None:
    """Refuse a new passphrase too weak to protect a vault, saying the rule.
    Opening a vault never checks: a vault keeps the passphrase it was given."""
    if not isinstance(passphrase, str) or not passphrase:
        raise BadKeyError("Error: the passphrase must be a non-empty string.")
    if len(passphrase) < PASSPHRASE_MIN_LENGTH or len(set(passphrase)) < PASSPHRASE_MIN_DIFFERENT:
        raise BadKeyError(
            f"Error: the passphrase is too weak to protect a vault: use at least {PASSPHRASE_MIN_LENGTH} "
            f"characters, at least {PASSPHRASE_MIN_DIFFERENT} of them different (a few random words work well)."
        )


def read_secret_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of a key or passphrase file, refusing one that others could read."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise BadKeyError(f"Error: cannot read the {what}: {err.strerror}.") from err
    if not stat.S_ISREG(st.st_mode):
        raise BadKeyError(f"Error: the {what} is not a regular file.")
    if st.st_mode & 0o077:
        raise BadKeyError(
            f"Error: the {what} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "run `chmod 600` on it first."
        )
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise BadKeyError(f"Error: cannot read the {what}: it is not readable UTF-8 text.") from err


def read_key_file(path: str | os.PathLike[str]) -> UserKey:
    """Load a user key from a file, refusing one that others could read."""
    return UserKey.from_string(read_secret_file(path, "key file"), source="key file")


def read_passphrase_file(path: str | os.PathLike[str]) -> str:
    """A passphrase from the first line of a file (mode 0600, as a key file)."""
    lines = read_secret_file(path, "passphrase file").splitlines()
    if not lines or not lines[0]:
        raise BadKeyError("Error: the passphrase file is empty: its first line is the passphrase.")
    return lines[0]


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
    seal_key: bytes = field(default=b"", repr=False)  # authenticates commits

    @classmethod
    def from_raw(cls, key_id: str, raw: bytes) -> DataKey:
        return cls(key_id, Fernet(raw), _derive(base64.urlsafe_b64decode(raw), b"vaultmem commit seal 1"))


class Keyring:
    """The unwrapped data keys of a vault, and the document they are stored in.

    The document carries a MAC under the user's key: someone without the key
    can still edit the JSON (drop an entry, change the active key), and that
    must be detected.  A keyring that fails its checks still opens for reading
    (``intact`` is False and ``problems`` says why); writes refuse it.
    """

    def __init__(self, doc: dict[str, Any], keys: dict[str, DataKey], user_key: UserKey) -> None:
        self.doc = doc
        self.keys = keys
        self.user_key = user_key
        self.problems: list[str] = []

    @property
    def intact(self) -> bool:
        return not self.problems

    @property
    def active(self) -> DataKey:
        key = self.keys.get(self.doc.get("active") or "")
        if key is None or not self.intact:
            raise IntegrityError(
                "Error: the vault's keyring has been altered since vaultmem last wrote it ("
                + "; ".join(self.problems or ["no active data key"])
                + "); writes are refused until an operator checks it with `vaultmem verify`."
            )
        return key

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
        ring = cls(doc, {}, user_key)
        ring.add_data_key(now)
        return ring

    def add_data_key(self, now: int) -> DataKey:
        """Start a new data key: it becomes the active one; old ones stay."""
        raw = Fernet.generate_key()
        key = DataKey.from_raw(secrets.token_hex(8), raw)
        wrapped = self.user_key.fernet.encrypt_at_time(raw, now).decode("ascii")
        self.doc["data_keys"].append({"id": key.id, "wrapped": wrapped, "created": now})
        self.doc["active"] = key.id
        self.keys[key.id] = key
        self._sign()
        return key

    def rewrap(self, new_user_key: UserKey, protector: dict[str, Any], now: int) -> None:
        """Wrap every data key under a new user key (the data keys stay)."""
        raws = {
            entry["id"]: self.user_key.fernet.decrypt(entry["wrapped"].encode("ascii"))
            for entry in self.doc["data_keys"]
        }
        for entry in self.doc["data_keys"]:
            entry["wrapped"] = new_user_key.fernet.encrypt_at_time(raws[entry["id"]], now).decode("ascii")
        self.doc["protector"] = protector
        self.user_key = new_user_key
        self._sign()

    @classmethod
    def union(cls, rings: Sequence[Keyring], user_key: UserKey, protector: dict[str, Any], now: int) -> Keyring:
        """One keyring holding every data key of ``rings`` (each opened with
        its own user key), wrapped under ``user_key``; the newest data key is
        the active one, so every clone that merges the same keyrings picks the same."""
        doc: dict[str, Any] = {
            "vaultmem_format": FORMAT_VERSION,
            "protector": protector,
            "data_keys": [],
            "active": None,
        }
        seen: set[str] = set()
        for ring in rings:
            for entry in ring.doc["data_keys"]:
                if entry["id"] in seen:
                    continue
                seen.add(entry["id"])
                wrapped = entry["wrapped"]
                if ring.user_key.mac_key != user_key.mac_key:
                    try:
                        raw = ring.user_key.fernet.decrypt(wrapped.encode("ascii"))
                    except InvalidToken as err:
                        raise WrongKeyError(
                            f"Error: data key {entry['id']} does not open with its keyring's key."
                        ) from err
                    wrapped = user_key.fernet.encrypt_at_time(raw, now).decode("ascii")
                doc["data_keys"].append({"id": entry["id"], "wrapped": wrapped, "created": entry["created"]})
        doc["data_keys"].sort(key=lambda e: (e["created"], e["id"]))
        doc["active"] = doc["data_keys"][-1]["id"]
        keys = {key_id: key for ring in rings for key_id, key in ring.keys.items()}
        merged = cls(doc, keys, user_key)
        merged._sign()
        return merged

    def _sign(self) -> None:
        self.doc["mac"] = document_mac(self.doc, self.user_key)
        self.problems = []

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
        """Unwrap every data key; a wrong user key is one WrongKeyError here."""
        keys: dict[str, DataKey] = {}
        try:
            entries = list(doc["data_keys"])
            if not entries:
                raise NotAVaultError("Error: the vault's keyring holds no data keys; restore it from a clone.")
            for entry in entries:
                raw = user_key.fernet.decrypt(entry["wrapped"].encode("ascii"))
                keys[entry["id"]] = DataKey.from_raw(entry["id"], raw)
        except InvalidToken as err:
            raise WrongKeyError(f"Error: the {user_key.source} given does not open this vault.") from err
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise NotAVaultError("Error: the vault's keyring is malformed; the folder is damaged.") from err
        ring = cls(doc, keys, user_key)
        ring.problems = keyring_problems(doc, user_key)
        return ring

    def to_bytes(self) -> bytes:
        return (json.dumps(self.doc, indent=2, sort_keys=True) + "\n").encode("utf-8")

    # -- commit seals ----------------------------------------------------------

    def seal_commit(self, data: bytes) -> bytes:
        """``<key id> <mac>`` for a commit object's bytes (without the seal)."""
        key = self.active
        return f"{key.id} {_mac(key.seal_key, _SEAL_PREFIX + data)}".encode("ascii")

    def check_commit_seal(self, seal: bytes, data: bytes) -> str | None:
        """None if ``seal`` authenticates ``data``, else what is wrong."""
        key_id, _, mac = seal.decode("ascii", "replace").partition(" ")
        key = self.keys.get(key_id)
        if key is None:
            return f"sealed with data key {key_id!r}, which is not in the keyring"
        if not hmac.compare_digest(mac, _mac(key.seal_key, _SEAL_PREFIX + data)):
            return "the seal does not match the commit: it was made or changed without the key"
        return None

    # -- blobs -------------------------------------------------------------

    def seal(self, path: str, content: bytes, now: int) -> bytes:
        """Encrypt one file version for ``path`` (canonical text)."""
        key = self.active
        token = key.fernet.encrypt_at_time(path.encode("utf-8") + b"\0" + content, now)
        return b"%s %d %s %d\n" % (BLOB_MAGIC, FORMAT_VERSION, key.id.encode("ascii"), len(content)) + token

    def open(self, path: str, blob: bytes) -> bytes:
        """Decrypt a blob written for ``path``; any doubt is an IntegrityError."""
        bad = IntegrityError(f"Error: the stored version of {path} failed authentication; run `vaultmem verify`.")
        bound, content = self._decrypt(blob, bad)
        if bound != path.encode("utf-8"):
            raise bad
        return content

    def open_any(self, blob: bytes) -> tuple[str, bytes]:
        """``(path, content)`` of a blob whose path is not known (git's textconv)."""
        bad = IntegrityError("Error: the blob failed authentication; run `vaultmem verify`.")
        bound, content = self._decrypt(blob, bad)
        try:
            return bound.decode("utf-8"), content
        except UnicodeDecodeError as err:
            raise bad from err

    def _decrypt(self, blob: bytes, bad: IntegrityError) -> tuple[bytes, bytes]:
        """The bound path and the content, checked against the header's length."""
        key_id, length, token = _split_blob(blob)
        key = self.keys.get(key_id)
        if key is None:
            raise bad
        try:
            payload = key.fernet.decrypt(token)
        except InvalidToken as err:
            raise bad from err
        bound, sep, content = payload.partition(b"\0")
        if not sep or len(content) != length:
            raise bad
        return bound, content

    def key_id_of(self, blob: bytes) -> str:
        return _split_blob(blob[:128] if b"\n" in blob[:128] else blob)[0]


def document_mac(doc: Mapping[str, Any], user_key: UserKey) -> str:
    body = {k: v for k, v in doc.items() if k != "mac"}
    return _mac(user_key.mac_key, json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def keyring_problems(doc: Mapping[str, Any], user_key: UserKey) -> list[str]:
    """What is wrong with a keyring document that the user's key opens."""
    problems: list[str] = []
    mac = doc.get("mac")
    if not isinstance(mac, str):
        problems.append("the keyring carries no MAC")
    elif not hmac.compare_digest(mac, document_mac(doc, user_key)):
        problems.append("the keyring's MAC does not match: it was edited without the key")
    ids = [entry.get("id") for entry in doc.get("data_keys", []) if isinstance(entry, dict)]
    if len(set(ids)) != len(ids):
        problems.append("the keyring lists a data key twice")
    if doc.get("active") not in ids:
        problems.append(f"the active data key {doc.get('active')!r} is not in the keyring")
    return problems


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
