"""Signing keys and git's SSH signature format (no git here).

A signer is an ed25519 key in OpenSSH's format.  A commit's signature is an
SSHSIG (OpenSSH's PROTOCOL.sshsig) over the commit's bytes without its
``gpgsig`` header, in the namespace ``git``, armored as
``-----BEGIN SSH SIGNATURE-----``: exactly what ``git commit -S`` makes with
``gpg.format=ssh``, so ``git verify-commit`` checks it with ``ssh-keygen``
and an allowed-signers file, and no vaultmem installed.  Checkpoints use the
same format in a namespace of their own, so a checkpoint's signature can
never pass for a commit's.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from vaultmem.core.crypto import read_secret_file
from vaultmem.errors import BadKeyError, StorageError, VaultError

NAMESPACE = "git"
CHECKPOINT_NAMESPACE = "vaultmem-checkpoint"
ENV_SIGNING_KEY = "VAULTMEM_SIGNING_KEY"
ENV_SIGNING_PASSPHRASE = "VAULTMEM_SIGNING_PASSPHRASE"
BEGIN = b"-----BEGIN SSH SIGNATURE-----"
END = b"-----END SSH SIGNATURE-----"
GPGSIG = b"gpgsig"
_MAGIC = b"SSHSIG"
_HASH = b"sha512"
_KEY_TYPE = b"ssh-ed25519"
_MAX_ARMOR = 4096  # an ed25519 signature armors to about 300 bytes


class SignatureError(VaultError):
    """A signature that does not check: ``kind`` says why (``bad signature``
    for bytes that do not verify, ``malformed`` for ones that do not parse)."""

    def __init__(self, message: str, kind: str = "bad signature") -> None:
        super().__init__(message)
        self.kind = kind


class ForeignKeyError(SignatureError):
    """A signature by a key of a type vaultmem never signs with (RSA, ECDSA,
    ...): ``ssh-keygen`` may find it good, but its key is no signer's, so it
    is an ``unknown signer`` rather than a bad signature."""

    def __init__(self, key_type: str, fingerprint: str) -> None:
        super().__init__(f"Error: the signature is by the {key_type} key {fingerprint}.", "unknown signer")
        self.key_type = key_type
        self.fingerprint = fingerprint


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def raw(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise SignatureError("Error: the signature is cut short.", "malformed")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.raw(4))[0]
        return value

    def string(self) -> bytes:
        return self.raw(self.uint32())

    def done(self) -> bool:
        return self.at == len(self.data)


def _signed_data(namespace: str, message: bytes) -> bytes:
    return (
        _MAGIC + _string(namespace.encode()) + _string(b"") + _string(_HASH) + _string(hashlib.sha512(message).digest())
    )


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key: its 32 raw bytes."""

    raw: bytes

    @property
    def blob(self) -> bytes:
        return _string(_KEY_TYPE) + _string(self.raw)

    @property
    def line(self) -> str:
        """``ssh-ed25519 AAAA...``, as in a ``.pub`` file and an allowed-signers line."""
        return "ssh-ed25519 " + base64.b64encode(self.blob).decode()

    @property
    def fingerprint(self) -> str:
        """``SHA256:...``, as ``ssh-keygen -l`` prints it."""
        return _fingerprint(self.blob)

    @classmethod
    def from_line(cls, text: str) -> PublicKey:
        """A key from ``ssh-ed25519 AAAA... [comment]`` (a ``.pub`` file's line)."""
        parts = text.strip().split()
        if len(parts) < 2 or parts[0] != "ssh-ed25519":
            raise BadKeyError(
                "Error: a signer's public key must be an ed25519 key in OpenSSH form (ssh-ed25519 AAAA...), "
                "such as the .pub file `vaultmem signer new` writes."
            )
        try:
            blob = base64.b64decode(parts[1], validate=True)
        except ValueError as err:
            raise BadKeyError("Error: the public key is not valid base64.") from err
        return cls.from_blob(blob)

    @classmethod
    def from_blob(cls, blob: bytes) -> PublicKey:
        reader = _Reader(blob)
        try:
            kind, raw = reader.string(), reader.string()
        except SignatureError as err:
            raise BadKeyError("Error: the public key is cut short.") from err
        if kind != _KEY_TYPE or len(raw) != 32 or not reader.done():
            raise BadKeyError("Error: the public key is not an ed25519 key.")
        return cls(raw)

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, data)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Signature:
    """A parsed SSH signature: the key it names and what it signs over."""

    key: PublicKey
    namespace: str
    signature: bytes  # the raw 64-byte ed25519 signature

    def check(self, message: bytes, namespace: str = NAMESPACE) -> None:
        """Raise SignatureError unless this signs ``message`` in ``namespace``."""
        if self.namespace != namespace:
            raise SignatureError(f"Error: the signature is for {self.namespace!r}, not {namespace!r}.", "bad signature")
        if not self.key.verify(self.signature, _signed_data(namespace, message)):
            raise SignatureError("Error: the signature does not match what it signs.", "bad signature")


def parse_signature(armored: bytes) -> Signature:
    """An armored ``-----BEGIN SSH SIGNATURE-----`` block, parsed (not checked)."""
    if len(armored) > _MAX_ARMOR:
        raise SignatureError("Error: the signature is too long to be an ed25519 signature.", "malformed")
    # read as ssh-keygen reads it (which git runs): the header line exactly, with
    # nothing before it nor on it, then everything up to the first footer, whatever
    # the white space in between; what follows the footer is not read.  A signature
    # that is good to vaultmem is then good to stock git, and the other way round.
    end = armored.find(b"\n" + END, len(BEGIN))
    if not armored.startswith(BEGIN + b"\n") or end < 0:
        raise SignatureError("Error: the signature is not an SSH signature.", "malformed")
    try:
        blob = base64.b64decode(armored[len(BEGIN) + 1 : end].translate(None, b" \t\n\r\x0b\x0c"), validate=True)
    except ValueError as err:
        raise SignatureError("Error: the signature is not valid base64.", "malformed") from err
    reader = _Reader(blob)
    if reader.raw(6) != _MAGIC or reader.uint32() != 1:
        raise SignatureError("Error: the signature is not an SSHSIG of version 1.", "malformed")
    blob = reader.string()
    try:
        key = PublicKey.from_blob(blob)
    except BadKeyError as err:
        key_type = _key_type(blob)
        if key_type is not None:
            raise ForeignKeyError(key_type, _fingerprint(blob)) from err
        raise SignatureError("Error: the signature names no ed25519 key.", "malformed") from err
    namespace = reader.string()
    reader.string()  # reserved
    if reader.string() != _HASH:
        raise SignatureError("Error: the signature uses a hash other than sha512.", "malformed")
    sig = _Reader(reader.string())
    if sig.string() != _KEY_TYPE:
        raise SignatureError("Error: the signature is not an ed25519 signature.", "malformed")
    raw = sig.string()
    if len(raw) != 64 or not sig.done() or not reader.done():
        raise SignatureError("Error: the signature has trailing or missing bytes.", "malformed")
    try:
        text = namespace.decode("ascii")
    except UnicodeDecodeError as err:
        raise SignatureError("Error: the signature's namespace is not text.", "malformed") from err
    return Signature(key, text, raw)


def _key_type(blob: bytes) -> str | None:
    """The type a public key blob names when it is one of OpenSSH's other key
    types (``ssh-rsa``, ``ecdsa-sha2-nistp256``, ...), else None."""
    try:
        name = _Reader(blob).string().decode("ascii")
    except (SignatureError, UnicodeDecodeError):
        return None
    if name.startswith(_PUBLIC_STARTS) and name != _KEY_TYPE.decode() and name.isprintable() and len(name) <= 64:
        return name
    return None


def _fingerprint(blob: bytes) -> str:
    """``SHA256:...`` of any public key blob, as ``ssh-keygen -l`` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def armor(blob: bytes) -> bytes:
    text = base64.b64encode(blob)
    body = b"\n".join(text[i : i + 70] for i in range(0, len(text), 70))
    return BEGIN + b"\n" + body + b"\n" + END + b"\n"


class SigningKey:
    """A writer's own ed25519 key.  ``sign`` makes git's SSH signature."""

    def __init__(self, key: Ed25519PrivateKey, comment: str = "") -> None:
        self._key = key
        self.comment = comment
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = PublicKey(raw)
        self._prefixes: dict[str, bytes] = {}  # what every signature of a namespace starts with

    def __repr__(self) -> str:
        return f"SigningKey({self.public.fingerprint})"

    @classmethod
    def generate(cls, comment: str = "") -> SigningKey:
        return cls(Ed25519PrivateKey.generate(), comment)

    @classmethod
    def from_text(cls, text: str, passphrase: str | None = None, *, source: str = "signing key") -> SigningKey:
        if not isinstance(text, str):
            raise BadKeyError(f"Error: the {source} must be given as its text (a str), not {type(text).__name__}.")
        if text.lstrip().startswith(_PUBLIC_STARTS):
            raise BadKeyError(_PUBLIC_GIVEN.format(source=source))
        data = text.encode("utf-8", "replace")  # a key is ASCII: a lone surrogate makes it no key, said below
        try:
            key = serialization.load_ssh_private_key(data, _passphrase_bytes(passphrase))
        except TypeError as err:  # encrypted without a passphrase, or a passphrase for a plain key
            if passphrase is None:
                raise BadKeyError(
                    f"Error: the {source} is protected by a passphrase; give it in "
                    f"{ENV_SIGNING_PASSPHRASE} or --signing-passphrase-file."
                ) from err
            raise BadKeyError(
                f"Error: the {source} has no passphrase, but one was given (--signing-passphrase-file, "
                f"{ENV_SIGNING_PASSPHRASE} or signing_passphrase=); give the key without one."
            ) from err
        except (ValueError, UnsupportedAlgorithm) as err:
            wrong = passphrase is not None and _encrypted(data)
            raise BadKeyError(
                f"Error: the passphrase does not open the {source}."
                if wrong
                else f"Error: the {source} is not an OpenSSH private key (make one with `vaultmem signer new`)."
            ) from err
        if not isinstance(key, Ed25519PrivateKey):
            raise BadKeyError(f"Error: the {source} is not an ed25519 key; vaultmem signs with ed25519 only.")
        return cls(key)

    @classmethod
    def load(cls, path: str | os.PathLike[str], passphrase: str | None = None) -> SigningKey:
        """A key file, refused when others can read it (as ``ssh`` does)."""
        name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if not isinstance(name, str):
            raise BadKeyError(
                f"Error: the signing key's path must be a str or a pathlib.Path, not {type(path).__name__}."
            )
        if "PRIVATE KEY-----" in name:  # the key's text, never echoed as a file name
            raise BadKeyError(
                f"Error: the signing key was given as its text where the key file's path belongs; give the "
                f"file's path, or the text in {ENV_SIGNING_KEY}. (The key is not shown here.)"
            )
        _refuse_public_file(path)
        return cls.from_text(read_secret_file(path, "signing key", "signing key", ENV_SIGNING_KEY), passphrase)

    def to_text(self, passphrase: str | None = None) -> str:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(_passphrase_bytes(passphrase) or b"")
            if passphrase
            else serialization.NoEncryption()
        )
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption
        ).decode("ascii")

    def save(self, path: str | os.PathLike[str], passphrase: str | None = None, comment: str = "") -> str:
        """Write the key (mode 0600, refusing to overwrite) and ``PATH.pub``;
        returns the public line.  Both files are written whole or not at all:
        on a full disk, or when either exists, neither is left behind."""
        text = self.to_text(passphrase)
        public = self.public.line + (f" {comment}" if comment else "") + "\n"
        pub = os.fspath(path) + ".pub"
        made: list[str] = []
        try:
            for name, data, mode in ((os.fspath(path), text, 0o600), (pub, public, 0o644)):
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                made.append(name)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data.encode("ascii"))
                    fh.flush()
                    os.fsync(fh.fileno())
        except OSError as err:
            for name in made:
                with contextlib.suppress(OSError):
                    os.unlink(name)
            failure = VaultError if err.errno == errno.EEXIST else StorageError
            raise failure(f"Error: cannot write {err.filename or path}: {_why(err)}; nothing was written.") from err
        return public.strip()

    def sign(self, message: bytes, namespace: str = NAMESPACE) -> bytes:
        """The armored SSH signature of ``message`` (``git commit -S``'s form)."""
        raw = self._key.sign(_signed_data(namespace, message))
        prefix = self._prefixes.get(namespace)
        if prefix is None:
            prefix = self._prefixes[namespace] = (
                _MAGIC
                + struct.pack(">I", 1)
                + _string(self.public.blob)
                + _string(namespace.encode())
                + _string(b"")
                + _string(_HASH)
            )
        return armor(prefix + _string(_string(_KEY_TYPE) + _string(raw)))


def resolve_signing_key(
    value: SigningKey | str | os.PathLike[str] | None,
    passphrase: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SigningKey | None:
    """A signing key as the tool and the command line take it: a
    :class:`SigningKey`, a key file's path, or (None) ``VAULTMEM_SIGNING_KEY``,
    a path or the key itself; its passphrase from ``passphrase`` or
    ``VAULTMEM_SIGNING_PASSPHRASE``.  None when none is given."""
    if isinstance(value, SigningKey):
        return value
    env = os.environ if environ is None else environ
    passphrase = passphrase or env.get(ENV_SIGNING_PASSPHRASE) or None
    if value is None:
        text = env.get(ENV_SIGNING_KEY)
        if not text:
            return None
        parts = text.split()
        public = len(parts) >= 2 and parts[0].startswith(_PUBLIC_STARTS) and parts[1].startswith("AAAA")
        if text.lstrip().startswith("-----BEGIN") or public:
            return SigningKey.from_text(text, passphrase, source=f"{ENV_SIGNING_KEY} key")
        return SigningKey.load(text, passphrase)
    if not isinstance(value, (str, os.PathLike)):
        raise BadKeyError("Error: signing_key must be a SigningKey or a key file's path.")
    return SigningKey.load(value, passphrase)


# what a public key's line starts with (a .pub file, an authorized_keys or allowed-signers line)
_PUBLIC_STARTS = ("ssh-", "ecdsa-", "sk-ssh-", "sk-ecdsa-")
_PUBLIC_GIVEN = (
    "Error: the {source} is a public key (ssh-ed25519 AAAA...); commits are signed with the private key: "
    "the key file without .pub, which `vaultmem signer new` wrote beside it."
)


def _refuse_public_file(path: str | os.PathLike[str]) -> None:
    """A public key file given as the signing key is named as such, before its
    mode (a .pub file is readable by all, and chmod would not make it a key)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return  # read_secret_file says what it is
        with open(path, "rb") as fh:
            start = fh.read(64).lstrip()
    except (OSError, ValueError):  # ValueError: a NUL or a lone surrogate in the name, which read_secret_file names
        return
    if start.startswith(tuple(prefix.encode() for prefix in _PUBLIC_STARTS)):
        raise BadKeyError(_PUBLIC_GIVEN.format(source="signing key"))


def _passphrase_bytes(passphrase: str | None) -> bytes | None:
    """A passphrase as the bytes it was given in: one from the environment
    or a command line that is not UTF-8 keeps its bytes (as ``ssh-keygen``
    takes them), rather than failing to encode."""
    return passphrase.encode("utf-8", "surrogateescape") if passphrase else None


def _why(err: OSError) -> str:
    """What a failed write of a key file means, in a few words."""
    return {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EEXIST: "it exists (choose another file)",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "the folder is not writable",
        errno.EPERM: "the folder is not writable",
        errno.ENOENT: "no such folder",
        errno.EISDIR: "it is a folder",
        errno.ELOOP: "it is a symbolic link",
    }.get(err.errno or 0, err.strerror or str(err))


def _encrypted(data: bytes) -> bool:
    """Whether an OpenSSH private key needs a passphrase (then a key that
    would not open with one was given the wrong one)."""
    try:
        serialization.load_ssh_private_key(data, None)
    except TypeError:
        return True
    except (ValueError, UnsupportedAlgorithm):
        return False
    return False


def gpgsig_value(armored: bytes) -> bytes:
    """A signature as a commit header's value: continuation lines start with a space."""
    return armored.rstrip(b"\n").replace(b"\n", b"\n ")


def split_signature(raw_commit: bytes) -> tuple[bytes, bytes | None]:
    """A commit object's bytes without its ``gpgsig`` header (what the
    signature covers, as git computes it), and the armored signature or None."""
    head, sep, message = raw_commit.partition(b"\n\n")
    kept: list[bytes] = []
    sig: list[bytes] | None = None
    inside = False
    found = False
    for line in head.split(b"\n"):
        if inside and line.startswith(b" "):
            assert sig is not None
            sig.append(line[1:])
            continue
        inside = False
        if line.startswith(GPGSIG + b" ") and not found:
            sig = [line[len(GPGSIG) + 1 :]]
            inside = found = True
            continue
        kept.append(line)
    payload = b"\n".join(kept) + sep + message
    return payload, (b"\n".join(sig) + b"\n") if sig is not None else None
