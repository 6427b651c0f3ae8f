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
import copy
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from vaultmem.core import shred
from vaultmem.core.lru import LRU
from vaultmem.core.names import Names, is_sealed_text
from vaultmem.core.values import is_unicode
from vaultmem.errors import BadKeyError, ConflictError, ErasedError, IntegrityError, NotAVaultError, WrongKeyError

FORMAT_VERSION = 2  # what new vaults are made in
FORMATS = (1, 2)  # what this vaultmem reads
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
        if not is_unicode(passphrase):
            raise BadKeyError(NOT_UNICODE_PASSPHRASE)
        scrypt = Scrypt(salt=_checked_salt(kdf), length=32, n=kdf["n"], r=kdf["r"], p=kdf["p"])
        raw = scrypt.derive(passphrase.encode("utf-8"))
        return cls(Fernet(base64.urlsafe_b64encode(raw)), "passphrase", _derive(raw, b"vaultmem keyring mac 1"))


# What a keyring's scrypt settings may be: never cheaper than vaultmem writes
# (a keyring edited to n=2 would be a downgrade), never so costly that opening
# runs out of memory or for hours (a keyring edited to p=2**20).
_SCRYPT_MIN_MEMORY = 128 * 2**15 * 8  # 32 MiB, as written
_SCRYPT_MAX_MEMORY = 2**30  # 1 GiB
_SCRYPT_MAX_WORK = 2**15 * 8 * 32  # 32 times the cost vaultmem writes
_SALT_MIN_BYTES = 16


def _checked_salt(kdf: Mapping[str, Any]) -> bytes:
    """The salt of scrypt settings vaultmem would have written, or a one-line
    error before any work: the settings come from a file anyone with write
    access to the repository can edit."""
    n, r, p, salt = (kdf.get(name) for name in ("n", "r", "p", "salt"))
    try:
        raw = _unb64(salt) if isinstance(salt, str) else b""
    except ValueError:
        raw = b""
    numbers = all(type(v) is int and v >= 1 for v in (n, r, p))
    if (
        kdf.get("kdf") != "scrypt"
        or not numbers
        or n & (n - 1) != 0  # type: ignore[operator]
        or not _SCRYPT_MIN_MEMORY <= 128 * n * r <= _SCRYPT_MAX_MEMORY  # type: ignore[operator]
        or n * r * p > _SCRYPT_MAX_WORK  # type: ignore[operator]
        or len(raw) < _SALT_MIN_BYTES
    ):
        shown = ", ".join(f"{name}={kdf.get(name)!r}"[:40] for name in ("kdf", "n", "r", "p"))
        raise NotAVaultError(
            f"Error: the vault's keyring has passphrase settings vaultmem does not write ({shown}): "
            "it was edited outside vaultmem; restore it from a backup or a clone."
        )
    return raw


def new_kdf_params() -> dict[str, Any]:
    return {"kdf": "scrypt", "salt": _b64(secrets.token_bytes(16)), "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}


# The rule a new passphrase meets (``check_new_passphrase``).  A vault's
# passphrase guards every memory it will ever hold, and scrypt slows a
# guesser down but cannot save a short or repetitive one.
PASSPHRASE_MIN_LENGTH = 12
PASSPHRASE_MIN_DIFFERENT = 6
NOT_UNICODE_PASSPHRASE = "Error: the passphrase is not valid Unicode text (it holds bytes that are not UTF-8)."


def check_new_passphrase(passphrase: object) -> None:
    """Refuse a new passphrase too weak to protect a vault, saying the rule.
    Opening a vault never checks: a vault keeps the passphrase it was given."""
    if not isinstance(passphrase, str) or not passphrase:
        raise BadKeyError("Error: the passphrase must be a non-empty string.")
    if not is_unicode(passphrase):
        raise BadKeyError(NOT_UNICODE_PASSPHRASE)
    if len(passphrase) < PASSPHRASE_MIN_LENGTH or len(set(passphrase)) < PASSPHRASE_MIN_DIFFERENT:
        raise BadKeyError(
            f"Error: the passphrase is too weak to protect a vault: use at least {PASSPHRASE_MIN_LENGTH} "
            f"characters, at least {PASSPHRASE_MIN_DIFFERENT} of them different (a few random words work well)."
        )


def read_secret_file(path: str | os.PathLike[str], what: str, secret: str = "secret", env: str = "") -> str:
    """The text of a key or passphrase file, refusing one that others could
    read.  ``what`` names the kind of file (``key file``); every error names
    the path as given too, except a name that may be the ``secret`` itself
    (the secret's text where the file's path belongs: a name with spaces, a
    bare word, a key): that one is never shown, and the error says where
    the secret may go instead (``env``)."""
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(name, str):
        raise BadKeyError(
            f"Error: the {what} must be given as its path (a str or a pathlib.Path), not {type(path).__name__}."
        )
    try:
        st = os.stat(path)
    except (OSError, ValueError) as err:  # ValueError: a NUL or a lone surrogate in the name
        if isinstance(err, OSError):
            why = _reason(err)
        elif "\x00" in name:
            why = "the name holds a NUL character"
        else:
            why = "the name holds a lone surrogate, which no file name can hold"
        if secret.endswith("key") and _is_key_text(name):
            raise BadKeyError(
                f"Error: the {secret} was given as its text where the {what}'s path belongs; give the "
                f"file's path{f', or the text in {env}' if env else ''}. (The {secret} is not shown here.)"
            ) from err
        if _may_be_the_secret(name, err):
            raise BadKeyError(
                f"Error: cannot read the {what} given: {why}. Its name is not shown, in case it is the {secret} "
                f"itself: the option takes the file's path{f'; the {secret} may go in {env} instead' if env else ''}."
            ) from err
        raise BadKeyError(f"Error: cannot read the {what} {name}: {why}.") from err
    what = f"{what} {name}"
    if not stat.S_ISREG(st.st_mode):
        raise BadKeyError(f"Error: the {what} is not a regular file.")
    if st.st_mode & 0o077:
        # others who may write it could swap the secret; only reading is "readable"
        how = "readable by others" if st.st_mode & 0o044 else "writable or executable by others"
        raise BadKeyError(
            f"Error: the {what} is {how} (mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600` on it first."
        )
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a BOM, as Windows Notepad saves one, is not the secret
            return fh.read()
    except OSError as err:  # not permitted (another user's file): not a matter of its text
        raise BadKeyError(f"Error: cannot read the {what}: {_reason(err)}.") from err
    except UnicodeDecodeError as err:
        raise BadKeyError(f"Error: cannot read the {what}: it is not readable UTF-8 text.") from err


def _is_key_text(name: str) -> bool:
    """A vaultmem key's or a private key's text, given where a file's path belongs."""
    if "PRIVATE KEY" in name:
        return True
    try:
        return len(base64.urlsafe_b64decode(name.strip().encode("ascii"))) == 32
    except (ValueError, UnicodeEncodeError):
        return False


def _may_be_the_secret(name: str, err: BaseException) -> bool:
    """Whether the name of a secret file that could not be found may be the
    secret itself, so must not be shown: one too long for a file name, with
    spaces or control characters, or not plainly a path (``hunter2``, the
    ``a/b`` in a key's base64; see :func:`looks_like_a_path`)."""
    if not isinstance(err, OSError) or err.errno == errno.ENAMETOOLONG or len(name) > 255:
        return True
    if any(c.isspace() or not c.isprintable() for c in name):
        return True
    return not looks_like_a_path(name)


def looks_like_a_path(name: str) -> bool:
    """Whether a name that names no file is still plainly a path, so may be
    shown: a file name with an extension (``pass.txt``, ``~/vault.key``), or
    one below a folder that exists (``/srv/a/b``; not ``x/y`` nor ``/x/y``
    when ``x`` is not there).  A secret typed where a path belongs (a
    passphrase, a token, a key's base64) seldom is either."""
    if "." in os.path.basename(name).strip("."):
        return True
    folder = os.path.dirname(name)
    while folder not in ("", os.sep) and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder not in ("", os.sep)


def _reason(err: OSError) -> str:
    """The system's reason, as part of a sentence: "no such file or directory"."""
    reason = err.strerror or str(err)
    return reason[:1].lower() + reason[1:]


def read_key_file(path: str | os.PathLike[str], env: str = ENV_KEY) -> UserKey:
    """Load a user key from a file, refusing one that others could read.
    ``env``: where the key's text may go instead, named when the key's text
    is given as the path."""
    key = UserKey.from_string(read_secret_file(path, "key file", "key", env), source="key file")
    return replace(key, source=f"key file {os.fspath(path)}")  # a wrong key names the file


def read_passphrase_file(path: str | os.PathLike[str], env: str = "") -> str:
    """A passphrase from the first line of a file (mode 0600, as a key file),
    without a leading BOM; spaces around it are kept, as part of it.  ``env``:
    where the passphrase may go instead, named when the path may be it."""
    lines = read_secret_file(path, "passphrase file", "passphrase", env).splitlines()
    if not lines or not lines[0]:
        raise BadKeyError(f"Error: the passphrase file {os.fspath(path)} is empty: its first line is the passphrase.")
    return lines[0]


def key_from_environment(environ: Mapping[str, str] | None = None) -> UserKey | None:
    env = os.environ if environ is None else environ
    value = env.get(ENV_KEY)
    if not value:
        return None
    return UserKey.from_string(value, source=f"{ENV_KEY} environment variable")


@dataclass(frozen=True)
class DataKey:
    """A key that seals commits, and in format 1 also encrypts contents
    (``fernet``; None for a format 2 epoch, whose contents use per-version keys)."""

    id: str
    fernet: Fernet | None = field(repr=False)
    seal_key: bytes = field(default=b"", repr=False)  # authenticates commits

    @classmethod
    def from_raw(cls, key_id: str, raw: bytes) -> DataKey:
        return cls(key_id, Fernet(raw), _derive(base64.urlsafe_b64decode(raw), b"vaultmem commit seal 1"))


@dataclass(frozen=True)
class Erasure:
    """Who erased a file version, when and why (kept in the keyring by blob id)."""

    commit: str
    actor: str
    time: int
    reason: str

    def describe(self) -> str:
        try:
            when = "on " + datetime.fromtimestamp(self.time, tz=timezone.utc).date().isoformat()  # 0001-01-01
        except (OverflowError, ValueError, OSError):  # a time no calendar date has
            when = f"at time {self.time}"
        return f"erased {when} by {self.actor} ({self.reason})"


def blob_id(blob: bytes) -> str:
    """The git object id of ``blob``."""
    return hashlib.sha1(b"blob %d\0" % len(blob) + blob).hexdigest()


class Keyring:
    """The unwrapped keys of a vault, and the document they are stored in.

    Format 1 encrypts file contents under *data keys*.  Format 2 encrypts each
    file version under its own key, a leaf of an *epoch*'s puncturable key
    tree (:mod:`vaultmem.core.shred`) at the nonce in the blob's header, so
    erasing a version destroys its key alone; each epoch also has a seal key
    for commits, which is never destroyed.  A vault migrated from format 1
    keeps its data keys to read the versions written before.

    The document carries a MAC under the user's key: someone without the key
    can still edit the JSON (drop an entry, change the active key), and that
    must be detected.  A keyring that fails its checks still opens for reading
    (``intact`` is False and ``problems`` says why); writes refuse it.
    """

    def __init__(
        self,
        doc: dict[str, Any],
        keys: dict[str, DataKey],
        user_key: UserKey,
        covers: dict[str, shred.Cover] | None = None,
    ) -> None:
        self.doc = doc
        self.keys = keys
        self.user_key = user_key
        self.covers: dict[str, shred.Cover] = covers if covers is not None else {}
        self.problems: list[str] = []
        self._leaves: LRU[tuple[str, int], Fernet] = LRU(4096)
        # A migrated vault's format 1 versions are read through their shadows
        # (re-encrypted copies under format 2 keys): the store that holds
        # them sets this; ``shadows(blob id)`` is the shadow's bytes, or None.
        self.shadows: Callable[[str], bytes | None] | None = None
        # Sealed names (format 2): the name key, never destroyed; None when
        # the vault stores real names.
        self.names: Names | None = None
        # The user key before the last rewrap: the stored keyring opens with
        # it until the rewrapped one is written (see take).
        self.previous_user_key: UserKey | None = None
        # Erasures the forget commits of ``main`` record that this keyring
        # lacks (a keyring put back from before them, an erasure cut short):
        # the store that reads the history sets it; such a version reads as
        # erased even while its key is still here.
        self.recorded: dict[str, Erasure] = {}

    @property
    def format(self) -> int:
        return int(self.doc["vaultmem_format"])

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

    @property
    def erased(self) -> dict[str, Erasure]:
        """Erased file versions by blob id."""
        out: dict[str, Erasure] = {}
        for oid, entry in (self.doc.get("erased") or {}).items():
            out[oid] = Erasure(entry["commit"], entry["actor"], int(entry["time"]), entry["reason"])
        return out

    @classmethod
    def create(cls, user_key: UserKey, protector: dict[str, Any], now: int, fmt: int = FORMAT_VERSION) -> Keyring:
        if fmt not in FORMATS:
            raise ValueError(f"unknown vault format {fmt!r}")
        doc: dict[str, Any] = {"vaultmem_format": fmt, "protector": protector, "data_keys": [], "active": None}
        if fmt >= 2:
            doc["epochs"] = []
            doc["erased"] = {}
        ring = cls(doc, {}, user_key)
        ring.add_data_key(now)
        return ring

    def same_keys(self, other: Keyring) -> bool:
        """Whether both hold the same keys, erasures and active key (their
        wrapping may differ: every wrap draws a fresh IV)."""
        return (
            set(self.keys) == set(other.keys)
            and self.covers == other.covers
            and self.doc.get("erased") == other.doc.get("erased")
            and self.doc.get("active") == other.doc.get("active")
            and self.doc.get("protector") == other.doc.get("protector")
            and _names_key(self) == _names_key(other)
        )

    def supersedes(self, other: Keyring) -> bool:
        """Whether this keyring holds every key ``other`` holds, except ones
        it destroyed since: a later state of the same keyring, not a rollback."""
        if not set(other.keys) <= set(self.keys):
            return False
        if other.names is not None and _names_key(self) != _names_key(other):
            return False
        for epoch, cover in other.covers.items():
            mine = self.covers.get(epoch)
            if mine is None or shred.intersect(mine, cover) != mine:
                return False  # an erased key is back
        return True

    def _wrap(self, raw: bytes, now: int) -> str:
        return self.user_key.fernet.encrypt_at_time(raw, now).decode("ascii")

    def add_data_key(self, now: int) -> DataKey:
        """Start a new data key (format 1) or epoch (format 2): it becomes the
        active one; old ones stay."""
        key_id = secrets.token_hex(8)
        if self.format >= 2:
            seal_key = os.urandom(32)
            cover: shred.Cover = {"": os.urandom(32)}
            self.doc["epochs"].append(
                {
                    "id": key_id,
                    "created": now,
                    "seal": self._wrap(seal_key, now),
                    "cover": self._wrap(_encode_cover(cover), now),
                }
            )
            key = DataKey(key_id, None, seal_key)
            self.covers[key_id] = cover
        else:
            raw = Fernet.generate_key()
            key = DataKey.from_raw(key_id, raw)
            self.doc["data_keys"].append({"id": key.id, "wrapped": self._wrap(raw, now), "created": now})
        self.doc["active"] = key.id
        self.keys[key.id] = key
        self._sign()
        return key

    def migrate(self, now: int) -> None:
        """Format 1 to 2: the data keys stay (to read what was written under
        them); a new epoch becomes active for everything written from now on."""
        if self.format >= 2:
            return
        doc = copy.deepcopy(self.doc)
        doc["vaultmem_format"] = 2
        doc["epochs"] = []
        doc["erased"] = {}
        self.doc = doc
        self.add_data_key(now)

    def seal_names(self, now: int) -> Names:
        """Start sealing names (format 2): a new name key, wrapped under the
        user's key like the others; the same Names if there is one already."""
        if self.format < 2:
            raise ValueError("sealed names need storage format 2")
        if self.names is None:
            key = os.urandom(32)
            self.doc["names"] = {"wrapped": self._wrap(key, now), "created": now}
            self.names = Names(key)
            self._sign()
        return self.names

    def destroy_data_keys(self, now: int) -> None:
        """Format 2 after a migration that made a shadow of every format 1
        version: each data key is destroyed; only its seal key stays, so the
        seals of the commits made under it still check."""
        entries = []
        for entry in self.doc["data_keys"]:
            key = self.keys[entry["id"]]
            entries.append({"id": entry["id"], "seal": self._wrap(key.seal_key, now), "created": entry["created"]})
            self.keys[entry["id"]] = DataKey(entry["id"], None, key.seal_key)
        self.doc["data_keys"] = entries
        self._sign()

    def seal_shadow(self, of: str, path: str, content: bytes, now: int) -> bytes:
        """The shadow of the format 1 blob ``of`` (its id): its content for
        ``path``, under a format 2 key, bound to that blob."""
        return self.seal(f"{path}@{of}", content, now)

    def rewrap(self, new_user_key: UserKey, protector: dict[str, Any], now: int) -> None:
        """Wrap every key under a new user key (the keys themselves stay)."""
        old = self.user_key.fernet
        for entry in self.doc["data_keys"]:
            for name in ("wrapped", "seal"):
                if name in entry:
                    raw = old.decrypt(entry[name].encode("ascii"))
                    entry[name] = new_user_key.fernet.encrypt_at_time(raw, now).decode("ascii")
        for entry in self.doc.get("epochs", []):
            for name in ("seal", "cover"):
                raw = old.decrypt(entry[name].encode("ascii"))
                entry[name] = new_user_key.fernet.encrypt_at_time(raw, now).decode("ascii")
        if self.names is not None:
            self.doc["names"]["wrapped"] = new_user_key.fernet.encrypt_at_time(self.names.key, now).decode("ascii")
        self.doc["protector"] = protector
        self.previous_user_key = self.user_key
        self.user_key = new_user_key
        self._sign()

    def take(self, other: Keyring) -> None:
        """Become ``other`` (the keyring as stored), in place: every holder of
        this object then reads, writes and encrypts with the stored keys, not
        with a change whose write was refused."""
        self.doc = other.doc
        self.keys = other.keys
        self.user_key = other.user_key
        self.covers = other.covers
        self.problems = other.problems
        self.names = other.names
        self.previous_user_key = None
        self._leaves = LRU(4096)

    def destroy(self, blobs: Mapping[str, tuple[str, int]], erasure: Erasure, now: int) -> list[str]:
        """Destroy the keys of the format 2 blobs ``{blob id: (epoch, nonce)}``
        and record the erasure under each blob id; the blob ids whose key was
        destroyed here (not before)."""
        by_epoch: dict[str, list[int]] = {}
        done: list[str] = []
        for oid, (epoch, nonce) in blobs.items():
            cover = self.covers.get(epoch)
            if cover is None or not shred.alive(cover, nonce):
                continue
            by_epoch.setdefault(epoch, []).append(nonce)
            done.append(oid)
        if not done:
            return []
        for entry in self.doc["epochs"]:
            nonces = by_epoch.get(entry["id"])
            if nonces:
                cover = shred.puncture(self.covers[entry["id"]], nonces)
                self.covers[entry["id"]] = cover
                entry["cover"] = self._wrap(_encode_cover(cover), now)
        erased = self.doc.setdefault("erased", {})
        for oid in done:
            erased[oid] = {
                "commit": erasure.commit,
                "actor": erasure.actor,
                "time": erasure.time,
                "reason": erasure.reason,
            }
        self._leaves.clear()
        self._sign()
        return done

    @classmethod
    def union(cls, rings: Sequence[Keyring], user_key: UserKey, protector: dict[str, Any], now: int) -> Keyring:
        """One keyring holding every key of ``rings`` (each opened with its
        own user key), wrapped under ``user_key``; the newest key is the
        active one, so every clone that merges the same keyrings picks the
        same.  An epoch both hold keeps only the keys both still have: an
        erasure on either side stays an erasure."""
        fmt = max(ring.format for ring in rings)
        doc: dict[str, Any] = {"vaultmem_format": fmt, "protector": protector, "data_keys": [], "active": None}
        chosen: dict[str, tuple[Keyring, dict[str, Any]]] = {}
        for ring in rings:
            for entry in ring.doc["data_keys"]:
                known = chosen.get(entry["id"])
                if known is None or ("wrapped" in known[1] and "wrapped" not in entry):
                    chosen[entry["id"]] = (ring, entry)  # a key destroyed on either side stays destroyed
        for key_id, (ring, entry) in chosen.items():
            name = "wrapped" if "wrapped" in entry else "seal"
            wrapped = entry[name]
            if ring.user_key.mac_key != user_key.mac_key:
                wrapped = user_key.fernet.encrypt_at_time(_unwrap(ring, entry[name], key_id), now).decode("ascii")
            doc["data_keys"].append({"id": key_id, name: wrapped, "created": entry["created"]})
        doc["data_keys"].sort(key=lambda e: (e["created"], e["id"]))
        covers: dict[str, shred.Cover] = {}
        keys = {key_id: key for ring in rings for key_id, key in ring.keys.items()}
        for key_id, (ring, _entry) in chosen.items():
            keys[key_id] = ring.keys[key_id]
        if fmt >= 2:
            epochs: dict[str, dict[str, Any]] = {}
            for ring in rings:
                for entry in ring.doc.get("epochs", []):
                    cover = ring.covers[entry["id"]]
                    if entry["id"] in covers:
                        covers[entry["id"]] = shred.intersect(covers[entry["id"]], cover)
                    else:
                        covers[entry["id"]] = cover
                        epochs[entry["id"]] = {"id": entry["id"], "created": entry["created"]}
            for key_id, entry in epochs.items():
                entry["seal"] = user_key.fernet.encrypt_at_time(keys[key_id].seal_key, now).decode("ascii")
                entry["cover"] = user_key.fernet.encrypt_at_time(_encode_cover(covers[key_id]), now).decode("ascii")
            doc["epochs"] = sorted(epochs.values(), key=lambda e: (e["created"], e["id"]))
            erased: dict[str, Any] = {}
            for ring in rings:
                erased.update(ring.doc.get("erased") or {})
            doc["erased"] = dict(sorted(erased.items()))
        named = {_names_key(ring): ring for ring in rings if ring.names is not None}
        if len(named) > 1:
            raise ConflictError(
                "Error: this vault and the other side each sealed their names separately; "
                "nothing was changed. Keep one side and clone it again for the other."
            )
        names = next(iter(named.values())).names if named else None
        if names is not None:
            created = min(int(ring.doc["names"]["created"]) for ring in rings if ring.names is not None)
            wrapped = user_key.fernet.encrypt_at_time(names.key, now).decode("ascii")
            doc["names"] = {"wrapped": wrapped, "created": created}
        newest = sorted(doc["data_keys"] + doc.get("epochs", []), key=lambda e: (e["created"], e["id"]))
        doc["active"] = newest[-1]["id"]
        merged = cls(doc, keys, user_key, covers)
        merged.names = names
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
        if doc["vaultmem_format"] not in FORMATS:
            raise NotAVaultError(
                f"Error: this vault uses storage format {doc['vaultmem_format']!r}; this vaultmem reads "
                f"formats {' and '.join(map(str, FORMATS))}. Upgrade vaultmem to open it."
            )
        return doc

    @classmethod
    def unlock(cls, doc: dict[str, Any], user_key: UserKey) -> Keyring:
        """Unwrap every key; a wrong user key is one WrongKeyError here."""
        keys: dict[str, DataKey] = {}
        covers: dict[str, shred.Cover] = {}
        try:
            entries = list(doc["data_keys"])
            epochs = list(doc.get("epochs") or [])
            if not entries and not epochs:
                raise NotAVaultError("Error: the vault's keyring holds no data keys; restore it from a clone.")
            for entry in entries:
                if "wrapped" in entry:
                    raw = user_key.fernet.decrypt(entry["wrapped"].encode("ascii"))
                    keys[entry["id"]] = DataKey.from_raw(entry["id"], raw)
                else:  # migrated: the key itself is destroyed, its seal key stays
                    seal_key = user_key.fernet.decrypt(entry["seal"].encode("ascii"))
                    keys[entry["id"]] = DataKey(entry["id"], None, seal_key)
            for entry in epochs:
                seal_key = user_key.fernet.decrypt(entry["seal"].encode("ascii"))
                keys[entry["id"]] = DataKey(entry["id"], None, seal_key)
                covers[entry["id"]] = _decode_cover(user_key.fernet.decrypt(entry["cover"].encode("ascii")))
            named = doc.get("names")
            names = Names(user_key.fernet.decrypt(named["wrapped"].encode("ascii"))) if named is not None else None
        except InvalidToken as err:
            protector = doc.get("protector")
            if (
                isinstance(protector, dict)
                and protector.get("kind") == "passphrase"
                and user_key.source != "passphrase"
            ):
                raise WrongKeyError(  # a key given to a vault no key opens: say what does
                    f"Error: the {user_key.source} given does not open this vault: it is protected by a passphrase.",
                    step="give-passphrase",
                ) from err
            raise WrongKeyError(f"Error: the {user_key.source} given does not open this vault.") from err
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise NotAVaultError("Error: the vault's keyring is malformed; the folder is damaged.") from err
        ring = cls(doc, keys, user_key, covers)
        ring.names = names
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
        payload = path.encode("utf-8") + b"\0" + content
        if key.fernet is not None:
            token = key.fernet.encrypt_at_time(payload, now)
            return b"%s 1 %s %d\n" % (BLOB_MAGIC, key.id.encode("ascii"), len(content)) + token
        nonce = int.from_bytes(os.urandom(8), "big")
        fernet = self._leaf(key.id, nonce)
        if fernet is None:  # a fresh random nonce that was erased: 2**-64 per erased key; draw again
            return self.seal(path, content, now)
        token = fernet.encrypt_at_time(payload, now)
        return b"%s 2 %s %016x %d\n" % (BLOB_MAGIC, key.id.encode("ascii"), nonce, len(content)) + token

    def _leaf(self, epoch: str, nonce: int) -> Fernet | None:
        cached = self._leaves.get((epoch, nonce))
        if cached is not None:
            return cached
        cover = self.covers.get(epoch)
        raw = shred.leaf(cover, nonce) if cover is not None else None
        if raw is None:
            return None
        fernet = Fernet(base64.urlsafe_b64encode(raw))
        self._leaves.put((epoch, nonce), fernet)
        return fernet

    def open(self, path: str, blob: bytes) -> bytes:
        """Decrypt a blob written for ``path``; any doubt is an IntegrityError,
        an erased version an ErasedError."""
        bad = IntegrityError(f"Error: the stored version of {path} failed authentication; run `vaultmem verify`.")
        bound, content = self._decrypt(blob, bad, path)
        if bound != path.encode("utf-8"):
            raise bad
        return content

    def open_stored(self, stored: str, blob: bytes, shown: str | None = None) -> bytes:
        """Decrypt a blob found at ``stored`` in a tree: its real path, or,
        in a vault with sealed names, the sealed form of the path it binds.
        Errors name ``shown`` (the path as it was asked for), else ``stored``."""
        if self.names is None or not is_sealed_text(stored):
            return self.open(stored, blob)
        shown = shown or stored
        bad = IntegrityError(f"Error: the stored version of {shown} failed authentication; run `vaultmem verify`.")
        bound, content = self._decrypt(blob, bad, shown)
        try:
            real = bound.decode("utf-8")
            if self.names.seal_text(real) != stored:  # a name of tokens only seals to itself
                raise bad
        except (UnicodeDecodeError, ValueError, IndexError) as err:
            raise bad from err
        return content

    def open_any(self, blob: bytes) -> tuple[str, bytes]:
        """``(path, content)`` of a blob whose path is not known (git's textconv)."""
        bad = IntegrityError("Error: the blob failed authentication; run `vaultmem verify`.")
        bound, content = self._decrypt(blob, bad, None)
        try:
            return bound.decode("utf-8"), content
        except UnicodeDecodeError as err:
            raise bad from err

    def erasure_of(self, blob: bytes) -> Erasure | None:
        """The erasure of ``blob`` when its key was destroyed, or one the
        history records (:attr:`recorded`), else None."""
        if self.recorded:
            found = self.recorded.get(blob_id(blob))
            if found is not None:
                return found
        return self._record(blob_id(blob)) if self._destroyed(self.nonce_of(blob)) else None

    def _destroyed(self, located: tuple[str, int] | None) -> bool:
        """Whether the key at ``located`` (an epoch and a nonce) was destroyed."""
        if located is None or located[0] not in self.covers:
            return False
        return not shred.alive(self.covers[located[0]], located[1])

    def _record(self, oid: str) -> Erasure:
        found = self.erased.get(oid)
        return found if found is not None else Erasure("", "an unknown actor", 0, "no record kept")

    def _decrypt(self, blob: bytes, bad: IntegrityError, path: str | None) -> tuple[bytes, bytes]:
        """The bound path and the content, checked against the header's length."""
        fmt, key_id, nonce, length, token = _split_blob(blob)
        recorded = self.recorded.get(blob_id(blob)) if self.recorded else None
        if recorded is not None:
            what = f"this version of {path}" if path is not None else "this file version"
            raise ErasedError(f"Error: {what} was {recorded.describe()}; its content is gone.", recorded.commit)
        if fmt == 1:
            key = self.keys.get(key_id)
            if key is not None and key.fernet is None:
                return self._through_shadow(blob, bad, path)
            fernet = key.fernet if key is not None else None
        else:
            fernet = self._leaf(key_id, nonce)
            if fernet is None and key_id in self.covers:
                erasure = self.erasure_of(blob)
                assert erasure is not None
                what = f"this version of {path}" if path is not None else "this file version"
                raise ErasedError(f"Error: {what} was {erasure.describe()}; its content is gone.", erasure.commit)
        if fernet is None:
            raise bad
        try:
            payload = fernet.decrypt(token)
        except InvalidToken as err:
            raise bad from err
        bound, sep, content = payload.partition(b"\0")
        if not sep or len(content) != length:
            raise bad
        return bound, content

    def _shadow_of(self, blob: bytes) -> tuple[str, bytes] | None:
        oid = blob_id(blob)
        shadow = self.shadows(oid) if self.shadows is not None else None
        return (oid, shadow) if shadow is not None else None

    def _through_shadow(self, blob: bytes, bad: IntegrityError, path: str | None) -> tuple[bytes, bytes]:
        """A migrated format 1 version, read from its shadow: bound to this
        blob and to its path; an erased one is an ErasedError."""
        found = self._shadow_of(blob)
        if found is None:
            raise bad
        oid, shadow = found
        if self._destroyed(self.nonce_of(shadow)):
            erasure = self._record(oid)
            what = f"this version of {path}" if path is not None else "this file version"
            raise ErasedError(f"Error: {what} was {erasure.describe()}; its content is gone.", erasure.commit)
        bound, content = self._decrypt(shadow, bad, path)
        suffix = f"@{oid}".encode("ascii")
        if not bound.endswith(suffix) or len(content) != _split_blob(blob)[3]:
            raise bad
        return bound[: -len(suffix)], content

    def key_id_of(self, blob: bytes) -> str:
        return _split_blob(blob[:128] if b"\n" in blob[:128] else blob)[1]

    def nonce_of(self, blob: bytes) -> tuple[str, int] | None:
        """``(epoch, nonce)`` of a format 2 blob, None for format 1."""
        fmt, key_id, nonce, _, _ = _split_blob(blob[:128] if b"\n" in blob[:128] else blob)
        if fmt >= 2:
            return key_id, nonce
        key = self.keys.get(key_id)
        if key is not None and key.fernet is None:  # migrated: its shadow's key is its own
            found = self._shadow_of(blob)
            if found is not None:
                return self.nonce_of(found[1])
        return None


def _names_key(ring: Keyring) -> bytes | None:
    return ring.names.key if ring.names is not None else None


def _unwrap(ring: Keyring, wrapped: str, key_id: str) -> bytes:
    try:
        return ring.user_key.fernet.decrypt(wrapped.encode("ascii"))
    except InvalidToken as err:
        raise WrongKeyError(f"Error: data key {key_id} does not open with its keyring's key.") from err


def _encode_cover(cover: Mapping[str, bytes]) -> bytes:
    return json.dumps({prefix: _b64(node) for prefix, node in sorted(cover.items())}, separators=(",", ":")).encode()


def _decode_cover(data: bytes) -> shred.Cover:
    raw = json.loads(data.decode("utf-8"))
    if not isinstance(raw, dict):
        raise ValueError("a key cover is a JSON object")
    cover = {str(prefix): _unb64(node) for prefix, node in raw.items()}
    if not shred.check(cover):
        raise ValueError("a malformed key cover")
    return cover


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
    ids = [
        entry.get("id") for entry in [*doc.get("data_keys", []), *(doc.get("epochs") or [])] if isinstance(entry, dict)
    ]
    if len(set(ids)) != len(ids):
        problems.append("the keyring lists a data key twice")
    if doc.get("active") not in ids:
        problems.append(f"the active data key {doc.get('active')!r} is not in the keyring")
    return problems


def _split_blob(blob: bytes) -> tuple[int, str, int, int, bytes]:
    """``(format, key id, nonce, length, token)``; the nonce is 0 in format 1."""
    header, sep, token = blob.partition(b"\n")
    fields = header.split(b" ")
    if not sep or fields[0] != BLOB_MAGIC or len(fields) < 2 or fields[1] not in (b"1", b"2"):
        raise IntegrityError("Error: a stored blob is not in vaultmem format; run `vaultmem verify`.")
    try:
        if fields[1] == b"1" and len(fields) == 4:
            return 1, fields[2].decode("ascii"), 0, int(fields[3]), token
        if fields[1] == b"2" and len(fields) == 5 and len(fields[3]) == 16:
            return 2, fields[2].decode("ascii"), int(fields[3], 16), int(fields[4]), token
    except (UnicodeDecodeError, ValueError) as err:
        raise IntegrityError("Error: a stored blob has a malformed header; run `vaultmem verify`.") from err
    raise IntegrityError("Error: a stored blob has a malformed header; run `vaultmem verify`.")


def plaintext_size(blob: bytes) -> int:
    """The plaintext length a blob's header declares (no key needed)."""
    return _split_blob(blob[:128])[3] if b"\n" in blob[:128] else _split_blob(blob)[3]
