"""Sharing a vault through a git server: clone, remotes, push and pull.

What travels is what git stores: ciphertext blobs, trees of paths, sealed
commits, the keyring (data keys wrapped under the vault's key) and the policy.
Three branches make a vault, and all three travel: ``main``, the keyring
branch and the policy branch.

Nothing is ever forced.  A push that is not a fast-forward is refused (the
caller pulls first); a pull moves a branch only forward, to commits it has
checked: every commit sealed under the vault's keys, a keyring whose MAC holds
under the key this vault was opened with, a policy commit sealed like any
other.  A pulled branch moves through the one commit path (``CommitPath.advance``):
the fetched objects are synced, the move is journaled, then made, under the
writer lock, so a power cut or a kill leaves the state before or after.

Histories that diverged (both sides wrote since they last synced) are
merged by the store (:mod:`vaultmem.repo.merge`); this module says which
branches need it (:func:`relation`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import pygit2
from pygit2.enums import ObjectType

from vaultmem.core.crypto import Keyring, UserKey, looks_like_a_path
from vaultmem.core.versions import split_seal
from vaultmem.errors import ConflictError, IntegrityError, VaultError, WrongKeyError
from vaultmem.git import durable, prune
from vaultmem.git.commits import CommitPath, Damaged, read_ref
from vaultmem.repo.history import added_since, descends, merge_base
from vaultmem.repo.keys import KEYRING_REF, SHADOWS_REF, keyring_blob, keyring_objects
from vaultmem.repo.merge import MergeReport
from vaultmem.repo.policy import POLICY_REF
from vaultmem.repo.signed import CHECKPOINTS_REF, SIGNERS_REF, signers_problems

MAIN_REF = "refs/heads/main"
# everything a vault is: all of it travels
BRANCHES = (MAIN_REF, KEYRING_REF, POLICY_REF, SHADOWS_REF, SIGNERS_REF, CHECKPOINTS_REF)
# A push moves the keyring (and a migrated vault's shadows) first and main
# last: a push cut short leaves the server with keys for every version its
# main holds, never the other way round.
PUSH_ORDER = (SHADOWS_REF, KEYRING_REF, SIGNERS_REF, POLICY_REF, MAIN_REF, CHECKPOINTS_REF)


@dataclass(frozen=True)
class Remote:
    name: str
    url: str

    @property
    def shown(self) -> str:
        """The URL to print: a password in it (or, over http, a user name,
        which can be a token) as ``***``.  vaultmem never stores one, but
        stock git's `git remote add` does."""
        return shown_url(self.url)


def shown_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a URL that cannot be read)"
    user, at, host = parts.netloc.rpartition("@")
    if not at or not (parts.password is not None or parts.scheme in ("http", "https")):
        return url
    name, colon, _ = user.partition(":")
    masked = ("***" if parts.scheme in ("http", "https") else name) + (":***" if colon else "")
    return parts._replace(netloc=f"{masked}@{host}").geturl()


@dataclass
class Transfer:
    """What a push or a pull moved: for each branch, (from, to) ids in full
    (None where the branch did not exist); branches that did not move are left out."""

    remote: str
    moved: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    merge: MergeReport | None = None  # a pull that merged main: what it merged
    # after a pull, the branches still to push: those the remote has no such
    # branch for, and those where this vault holds versions the remote lacks
    absent: tuple[str, ...] = ()
    ahead: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.moved)


ENV_USERNAME = "VAULTMEM_GIT_USERNAME"
ENV_PASSWORD = "VAULTMEM_GIT_PASSWORD"  # the name of a variable
ENV_SSH_KEY = "VAULTMEM_SSH_KEY"
ENV_SSH_PASSPHRASE = "VAULTMEM_SSH_PASSPHRASE"
ENV_TIMEOUT = "VAULTMEM_SYNC_TIMEOUT"
# Seconds libgit2 waits to connect to a server, and for each read or write on
# the connection: a server that accepts and never answers ends the transfer
# with an error, never hangs it.
DEFAULT_TIMEOUT = 30.0


def network_timeout() -> float:
    """The bound on each network step, in seconds: ``VAULTMEM_SYNC_TIMEOUT``, else 30."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise VaultError(f"Error: {ENV_TIMEOUT} must be a positive number of seconds. Nothing was changed.")
    return seconds


def _bounded() -> None:
    """Bound libgit2's connection and every read and write on it (process-wide settings)."""
    millis = max(1, min(2**31 - 1, round(network_timeout() * 1000)))
    if pygit2.settings.server_timeout != millis:
        pygit2.settings.server_timeout = millis
    if pygit2.settings.server_connect_timeout != millis:
        pygit2.settings.server_connect_timeout = millis


def _timed_out(err: Exception) -> bool:
    return "timed out" in str(err).lower()


def _silence(err: Exception) -> str:
    """What a transport error says, or that the server stayed silent past the bound."""
    if _timed_out(err):
        return f"the server did not answer within {network_timeout():g} s"
    return str(err)


class _CtrlC:
    """Ctrl-C (SIGINT) during a libgit2 transfer.  libgit2 runs the transfer
    in C and calls into Python only for its callbacks, and Python runs a
    signal's handler at the first Python line it reaches: the entry of
    pygit2's callback wrapper, outside its ``try``, where the
    KeyboardInterrupt is dropped (``Exception ignored from cffi callback``,
    a traceback) and the transfer goes on to the end, exit code 0.  So while
    a transfer runs, SIGINT is only noted; the next callback runs the handler
    inside the wrapper (:meth:`deliver`), where pygit2 keeps its
    KeyboardInterrupt, stops libgit2 and raises it; a transfer that ends
    first runs it as it returns.  In the main thread only, which alone runs
    signal handlers."""

    def __init__(self) -> None:
        self.caught: list[tuple[int, FrameType | None]] = []
        self.previous: Callable[[int, FrameType | None], Any] | None = None

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            handler = signal.getsignal(signal.SIGINT)
            if callable(handler):  # ignored, or the default action (the process ends): nothing to note
                self.previous = handler
                signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.caught.append((signum, frame))

    def deliver(self) -> None:
        """Run the handler of each SIGINT noted (Python's raises KeyboardInterrupt)."""
        while self.caught and self.previous is not None:
            self.previous(*self.caught.pop(0))

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.deliver()


class _Callbacks(pygit2.RemoteCallbacks):
    """Credentials when the server asks, and what it refused in a push.

    Credentials come from where git users keep them, never from the vault:
    for https, ``VAULTMEM_GIT_USERNAME`` / ``VAULTMEM_GIT_PASSWORD``, else git's
    own credential helpers (``git credential fill``); for ssh, ssh-agent, else
    the key file in ``VAULTMEM_SSH_KEY``.  Each is offered once: a server that
    refuses it gets a clear error, not a loop."""

    def __init__(self, progress: Callable[[int, int], None] | None = None, ctrl_c: _CtrlC | None = None) -> None:
        super().__init__()
        self.refused: dict[str, str] = {}
        self.offered: set[str] = set()
        self.progress = progress
        self.ctrl_c = ctrl_c or _CtrlC()
        self.said: list[str] = []  # what the server wrote to the client (its hooks' output), bounded

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.refused[refname] = message

    def sideband_progress(self, string: str) -> None:
        self.ctrl_c.deliver()
        if sum(map(len, self.said)) < 4096:
            self.said.append(string)

    def server_said(self) -> str:
        """The server's own words (a hook's reason for refusing), on one line, printable only."""
        text = "".join(self.said).replace("\r", "\n")
        lines = ["".join(c for c in line if c.isprintable()).strip() for line in text.split("\n")]
        shown = "; ".join(line for line in lines if line and not _GIT_PROGRESS.match(line))
        return shown if len(shown) <= 500 else shown[:499] + "\u2026"

    def transfer_progress(self, stats: Any) -> None:
        self.ctrl_c.deliver()
        if self.progress is not None and stats.total_objects:
            self.progress(stats.received_objects, stats.total_objects)

    def push_transfer_progress(self, objects_pushed: int, total_objects: int, bytes_pushed: int) -> None:
        self.ctrl_c.deliver()
        if self.progress is not None and total_objects:
            self.progress(objects_pushed, total_objects)

    def certificate_check(self, certificate: Any, valid: bool, host: bytes | str) -> bool:
        """A server is trusted only as git would trust it: a TLS certificate
        that validates, an ssh host key listed in ``~/.ssh/known_hosts``."""
        if not valid:
            shown = host.decode("utf-8", "replace") if isinstance(host, bytes) else host
            raise pygit2.GitError(
                f"the server {shown} is not one this machine knows (its TLS certificate does not validate, or its "
                "ssh host key is not in ~/.ssh/known_hosts or has changed); check it before trusting it"
            )
        return True

    def credentials(self, url: str, username_from_url: str | None, allowed_types: pygit2.enums.CredentialType) -> Any:
        self.ctrl_c.deliver()
        kinds = pygit2.enums.CredentialType
        if allowed_types & kinds.USERPASS_PLAINTEXT and "userpass" not in self.offered:
            self.offered.add("userpass")
            found = _userpass(url, username_from_url)
            if found is not None:
                return pygit2.UserPass(*found)
        if allowed_types & kinds.SSH_KEY:
            user = username_from_url or "git"
            if os.environ.get("SSH_AUTH_SOCK") and "agent" not in self.offered:
                self.offered.add("agent")
                return pygit2.KeypairFromAgent(user)
            key_file = os.environ.get(ENV_SSH_KEY)
            if key_file and "keyfile" not in self.offered:
                self.offered.add("keyfile")
                _check_ssh_key_file(key_file)
                public = key_file + ".pub" if os.path.exists(key_file + ".pub") else None
                return pygit2.Keypair(user, public, key_file, os.environ.get(ENV_SSH_PASSPHRASE, ""))
        if allowed_types & kinds.USERNAME and "username" not in self.offered:
            self.offered.add("username")
            return pygit2.Username(username_from_url or "git")
        raise pygit2.GitError(
            "the server wants credentials and none given here opens it (see docs/sync.md, Credentials)"
        )


def _check_ssh_key_file(key_file: str) -> None:
    """``VAULTMEM_SSH_KEY`` must name a readable file; libgit2 would only say
    "Unable to open private key file".  A key's text put in the variable is
    said to be one, and never shown."""
    if "PRIVATE KEY" in key_file or "\n" in key_file:
        raise pygit2.GitError(
            f"{ENV_SSH_KEY} holds a key's text where the private key file's path belongs; put the key in a file "
            "(mode 0600) and give its path (the key is not shown here)"
        )
    try:
        with open(key_file, "rb"):
            pass
    except OSError as err:
        shown = key_file if looks_like_a_path(key_file) else "the file it names"
        reason = (err.strerror or str(err)).lower()
        raise pygit2.GitError(
            f"{ENV_SSH_KEY} names a private key file this user cannot read: {shown}: {reason}"
        ) from None


_GIT_PROGRESS = re.compile(r"^[A-Za-z][A-Za-z ]*: +\d+% \(")  # "Resolving deltas: 100% (3/3)": no reason


def _userpass(url: str, username: str | None) -> tuple[str, str] | None:
    """A username and password for ``url``: the environment, else git's credential helpers."""
    if os.environ.get(ENV_USERNAME) and os.environ.get(ENV_PASSWORD):
        return os.environ[ENV_USERNAME], os.environ[ENV_PASSWORD]
    parts = urlsplit(url)
    request = f"protocol={parts.scheme}\nhost={parts.netloc.rpartition('@')[2]}\npath={parts.path.lstrip('/')}\n"
    if username:
        request += f"username={username}\n"
    try:
        done = subprocess.run(
            ["git", "credential", "fill"],
            input=request + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},  # never a prompt from inside a call
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0 or not fields.get("username") or not fields.get("password"):
        return None
    return fields["username"], fields["password"]


def short_name(ref: str) -> str:
    return ref.removeprefix("refs/heads/")


def tracking(remote: str, ref: str) -> str:
    return f"refs/remotes/{remote}/{short_name(ref)}"


def list_remotes(repo: pygit2.Repository) -> list[Remote]:
    return [Remote(r.name, r.url) for r in repo.remotes if r.name and r.url]


def check_url(url: str) -> None:
    """Refuse a URL that could not be stored safely or could never be
    reached: empty, with a control character, a network URL naming no host,
    or holding a password (credentials never land in the vault's
    config, a log or a message: use a credential helper or ssh-agent)."""
    if not isinstance(url, str) or not url.strip() or any(ord(c) < 32 for c in url):
        raise VaultError("Error: the remote's URL is empty or holds a control character.")
    try:
        parts = urlsplit(url)
    except ValueError as err:
        # not shown: it may hold a password the check could not find
        raise VaultError(
            f"Error: the remote's URL cannot be read ({err}, such as a '[' with no ']' in the host); check it "
            "and give it again. Nothing was stored."
        ) from None
    if parts.password:
        raise VaultError(
            "Error: the URL holds a password, which would be stored in the vault's config; give the URL "
            "without it and let git's credential helper or ssh-agent supply it."
        )
    if parts.scheme in ("http", "https", "ssh", "git") and not parts.hostname:
        raise VaultError(
            f"Error: the remote's URL names no server: one starting {parts.scheme}:// needs a host, such as "
            f"{parts.scheme}://git.example.com/support.vault. Nothing was stored."
        )
    if parts.scheme in ("http", "https") and parts.username:
        # Hosts take a token in the user name too (https://TOKEN@github.com/...): over http
        # a user name belongs with the password, in the environment or a credential helper.
        raise VaultError(
            "Error: the URL holds a user name, which over https can be a token and would be stored in the "
            "vault's config; give the URL without it, and the user name in VAULTMEM_GIT_USERNAME or git's "
            "credential helper."
        )


def add_remote(repo: pygit2.Repository, name: str, url: str) -> Remote:
    if (
        not isinstance(name, str)
        or not name
        or not name.isascii()
        or not name.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        # ASCII only, as the policy's sync_remote names a remote
        raise VaultError(f"Error: {name!r} is not a remote name: use ASCII letters, digits, '-', '_' and '.'.")
    if len(name) > 100:  # as the policy's sync_remote: refs/remotes/NAME/... must fit a file name
        raise VaultError(f"Error: a remote name is at most 100 characters; this one has {len(name)}.")
    check_url(url)
    if any(r.name == name for r in repo.remotes):
        raise VaultError(f"Error: the vault already has a remote named {name!r}.")
    if local_path(url) is not None and not url.startswith("file:"):
        url = os.path.abspath(url)  # a path on this machine works from any folder
    # what a remote of this name once held says nothing of this one's server (left by a sync
    # that ended after the old remote's removal): its witness would call the new server's history cut short
    with contextlib.suppress(KeyError, pygit2.GitError):
        del repo.config[_witness_key(name)]
    try:
        repo.remotes.create(name, url, f"+refs/heads/*:refs/remotes/{name}/*")
    except ValueError:  # git's own rules on top: no '..', no leading '.', no '.lock' at the end
        raise VaultError(
            f"Error: {name!r} is not a remote name git accepts: use letters, digits, '-', '_' and '.', "
            "not starting with '.', without '..' and not ending in '.lock'."
        ) from None
    return Remote(name, url)


def remove_remote(repo: pygit2.Repository, name: str) -> None:
    if not any(r.name == name for r in repo.remotes):
        raise VaultError(f"Error: the vault has no remote named {name!r}.")
    # libgit2 also deletes the settings of the branches that track it (branch.X.remote, .merge)
    sections = {("remote", name)}
    with contextlib.suppress(pygit2.GitError):
        for entry in repo.config:
            parts = entry.name.split(".")
            if parts[0].lower() == "branch" and parts[-1].lower() == "remote" and entry.value == name:
                sections.add(("branch", ".".join(parts[1:-1])))
    repo.remotes.delete(name)
    _drop_empty_sections(Path(repo.path) / "config", sections)


_HEADER = re.compile(r'\s*\[\s*([A-Za-z0-9-]+)\s+"((?:[^"\\\n]|\\.)*)"\s*\]\s*')


def _drop_empty_sections(config: Path, sections: set[tuple[str, str]]) -> None:
    """Remove the headers libgit2 leaves behind once it has deleted every
    entry of a section (``[remote "NAME"]``, ``[branch "main"]``), with the
    comments in them, as ``git remote remove`` does.  Written as git writes
    its config (``config.lock``, then renamed over it); best effort: a config
    that another program holds locked keeps the empty headers, which name
    nothing."""
    config = Path(os.path.realpath(config))  # a config that is a symlink stays one, as git keeps it
    try:
        lines = config.read_bytes().decode("utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return
    kept: list[str] = []
    index = 0
    while index < len(lines):
        end = index + 1
        header = _HEADER.fullmatch(lines[index])
        if header and (header[1].lower(), re.sub(r"\\(.)", r"\1", header[2])) in sections:
            while end < len(lines) and (lines[end].strip() == "" or lines[end].lstrip()[:1] in ("#", ";")):
                end += 1
            if end == len(lines) or lines[end].lstrip().startswith("["):  # nothing is left in it
                index = end
                continue
        kept.extend(lines[index:end])
        index = end
    if len(kept) == len(lines):
        return
    lock = config.with_name(config.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write("".join(kept).encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(lock, os.stat(config).st_mode & 0o7777)
        os.replace(lock, config)
    except OSError:
        with contextlib.suppress(OSError):
            lock.unlink()


def _remote(repo: pygit2.Repository, name: str) -> pygit2.Remote:
    """The remote ``name`` as a transfer uses it: its URL only.  An anonymous
    remote has no refspecs of its own, so a fetch writes nothing but the
    tracking refs it is given: a remote whose configured refspec writes into
    ``refs/heads`` (``git clone --mirror`` makes ``+refs/*:refs/*``) would
    otherwise have libgit2 move the vault's own branches to the server's
    tips, unchecked, dropping the versions only this vault holds."""
    for remote in repo.remotes:
        if remote.name == name:
            return repo.remotes.create_anonymous(remote.url or "")
    raise VaultError(f"Error: the vault has no remote named {name!r}; add one with its URL first.")


_LOCAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_LOCAL_WORDS = ("No space left on device", "Disk quota exceeded", "Read-only file system")


def _transport_error(name: str, err: Exception) -> VaultError:
    # libgit2's messages name the URL at most; credentials never reach them.
    text = str(err)
    if (isinstance(err, OSError) and err.errno in _LOCAL_ERRNOS) or any(words in text for words in _LOCAL_WORDS):
        # the trouble is on this machine (a full disk, a read-only one), not the way to the server
        return VaultError(f"Error: the transfer with the remote {name!r} failed here: {text}. Nothing was changed.")
    if _timed_out(err):
        return VaultError(
            f"Error: the remote {name!r} did not answer within {network_timeout():g} s. Nothing was changed."
        )
    return VaultError(f"Error: cannot reach the remote {name!r}: {text}. Nothing was changed.")


def _missing_server(name: str, url: str) -> None:
    """A remote on this machine that is not there: said as such."""
    folder = local_path(url)
    if folder is not None and not folder.is_dir():
        raise VaultError(
            f"Error: cannot reach the remote {name!r}: no repository at {os.path.abspath(folder)}"
            f"{_a_file(folder)}. Nothing was changed."
        )


def _a_file(folder: Path) -> str:
    """What stands where a server's folder should be, when something does
    (a git bundle, say, which is no server)."""
    return ", only a file" if folder.exists() else ""


_T = TypeVar("_T")


def _past_incoming(op: Callable[[], _T]) -> _T:
    """Run ``op``, a libgit2 transfer, again when it failed only because a
    push running on the same server (a path or ``file://``) removed its
    short-lived incoming refs while libgit2 listed the server's refs: those
    refs are never fetched, and they are gone within moments."""
    for attempt in range(40):
        try:
            return op()
        except pygit2.GitError as err:
            if attempt == 39 or not (INCOMING in str(err) and "not found" in str(err)):
                raise
        time.sleep(min(0.1, 0.005 * (attempt + 1)))
    raise AssertionError("unreachable")


def fetch(repo: pygit2.Repository, name: str, progress: Callable[[int, int], None] | None = None) -> None:
    """The remote's three branches into ``refs/remotes/NAME/*`` (objects and
    tracking refs only: no branch of the vault moves; the tracking ref of a
    branch the server no longer has goes), then the witness check:
    IntegrityError if the remote's ``main`` no longer contains what it held
    when this vault last synced with it, or is gone."""
    remote = _remote(repo, name)
    _missing_server(name, remote.url or "")
    _bounded()
    _clear_killed_fetch(Path(repo.path), name)
    specs = [f"+{ref}:{tracking(name, ref)}" for ref in BRANCHES]
    for attempt in range(2):
        try:
            # pruned: a branch the server no longer has leaves its tracking ref too,
            # so a push sends it again and the witness sees a main that is gone
            with _CtrlC() as ctrl_c:
                _past_incoming(
                    lambda: remote.fetch(
                        specs, callbacks=_Callbacks(progress, ctrl_c), prune=pygit2.enums.FetchPrune.PRUNE
                    )
                )
        except (pygit2.GitError, OSError) as err:
            raise _transport_error(name, err) from err
        # `git repack -ad` run between libgit2 writing the fetched pack and the
        # tracking ref naming it drops the pack: the ref then names a commit
        # this vault lacks, and the next fetch would tell the server it has
        # it.  Such a ref goes, and the fetch runs again.
        lost = [ref for ref in BRANCHES if _names_missing(repo, tracking(name, ref))]
        if not lost:
            break
        for ref in lost:
            repo.references.delete(tracking(name, ref))
        if attempt == 1:
            raise IntegrityError(
                f"Error: the objects fetched from the remote {name!r} went missing twice (another program is "
                "removing them, such as `git repack -ad`); pull again when it has finished. Nothing was changed."
            )
    problem = witness_problem(repo, name)
    if problem is not None:
        raise WitnessError(
            f"Error: {problem}. This vault's branches were not changed; its refs/remotes/{name}/ now record what "
            "the server holds, for `vaultmem verify`. Check the server before syncing again; once it is right (a new "
            f"server, say), `vaultmem remote remove {name}` then `vaultmem remote add {name} URL` start afresh."
        )


class WitnessError(IntegrityError):
    """The remote's ``main`` no longer holds what it held when this vault
    last synced: the one refusal that keeps what the fetch recorded of the
    server (``refs/remotes/NAME/*``), since ``vaultmem verify`` reports the
    finding from it."""


@contextlib.contextmanager
def tracking_kept(repo: pygit2.Repository, name: str) -> Iterator[None]:
    """Put the remote's tracking refs (``refs/remotes/NAME/*``) and
    ``FETCH_HEAD`` back as they were when the block fails: a pull or push
    that is refused ("Nothing was changed") leaves what ``git log
    origin/main`` and ``git status`` show as it found it, not the server's
    tip it refused.  A :class:`WitnessError` keeps them (``verify`` reads it
    there); the objects fetched stay, named by nothing."""
    prefix = f"refs/remotes/{name}/"
    before = _tracking_state(repo, prefix)
    head = Path(repo.path) / "FETCH_HEAD"
    try:
        fetched = head.read_bytes()
    except OSError:
        fetched = None
    try:
        yield
    except WitnessError:
        raise
    except BaseException:
        with contextlib.suppress(pygit2.GitError, OSError, ValueError, KeyError):
            _restore_tracking(repo, prefix, before)
            _restore_file(head, fetched)
        raise


def _tracking_state(repo: pygit2.Repository, prefix: str) -> dict[str, pygit2.Oid | str]:
    """Each tracking ref under ``prefix``: its id, or the name a symbolic one names."""
    state: dict[str, pygit2.Oid | str] = {}
    for refname in repo.references:
        if refname.startswith(prefix):
            found = repo.references.get(refname)
            if found is not None:
                target = found.target
                state[refname] = target if isinstance(target, str) else pygit2.Oid(hex=str(target))
    return state


def _restore_tracking(repo: pygit2.Repository, prefix: str, before: dict[str, pygit2.Oid | str]) -> None:
    now = _tracking_state(repo, prefix)
    for refname in now.keys() - before.keys():
        repo.references.delete(refname)
    for refname, target in before.items():
        if now.get(refname) != target:
            repo.references.create(refname, target, force=True)


def _restore_file(path: Path, data: bytes | None) -> None:
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    spare = path.with_name(f"{path.name}.vaultmem-{os.getpid()}")
    try:
        with open(spare, "wb") as fh:
            fh.write(data)
        os.replace(spare, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            spare.unlink()


KILLED_PACK_AGE = 600.0  # seconds a pack being received stays untouched before it counts as left over


def _clear_killed_fetch(gitdir: Path, name: str) -> None:
    """Remove what a fetch killed midway left (a pull or push killed, a
    power cut): the lock files libgit2 takes for a moment while it writes
    ``refs/remotes/NAME/BRANCH`` and ``shallow`` (left there, every later
    fetch failed on them, and with it every pull and push), and the pack it
    was receiving (``objects/pack/pack_git2_*``, as large as what was sent
    before the kill, which nothing else removes).  The caller holds the
    vault's sync lock, so no fetch of this vault is running, and only a
    fetch writes such a pack here: what is there is left over (but for a
    push from a clone on this machine into this vault, used as its server:
    a pack untouched for :data:`KILLED_PACK_AGE` seconds is no live one).
    The tracking refs the locks guard only say what the server held; the
    fetch writes them anew."""
    doomed = [gitdir / (tracking(name, ref) + ".lock") for ref in BRANCHES] + [gitdir / "shallow.lock"]
    with contextlib.suppress(OSError):
        for entry in os.scandir(gitdir / "objects" / "pack"):
            if entry.name.startswith("pack_git2_") and time.time() - entry.stat().st_mtime > KILLED_PACK_AGE:
                doomed.append(Path(entry.path))
    for lock in doomed:
        with contextlib.suppress(OSError):  # one that cannot go: the fetch says what is wrong
            lock.unlink()


def _names_missing(repo: pygit2.Repository, ref: str) -> bool:
    found = repo.references.get(ref)
    return found is not None and not repo.odb.exists(found.target)


# -- the remote as a witness ---------------------------------------------------------------
# Each remote remembers the last version of main it was seen to hold (after a
# clone, a push or a pull).  A server only ever gains versions: if its main no
# longer contains that one, its history was rewritten or cut short there.


def _witness_key(name: str) -> str:
    return f"remote.{name}.vaultmemwitness"


def witness(repo: pygit2.Repository, name: str) -> str | None:
    try:
        value = repo.config[_witness_key(name)]
    except KeyError:
        return None
    return str(value) if value else None


def remember(repo: pygit2.Repository, name: str) -> None:
    """Record the remote's ``main`` as fetched last as what it is known to
    hold.  Best effort: when the config cannot be written (a full disk), the
    witness stays at the version remembered before, which the server still
    holds too, and the next sync moves it on."""
    theirs = repo.references.get(tracking(name, MAIN_REF))
    if theirs is not None:
        with contextlib.suppress(pygit2.GitError, OSError):
            repo.config[_witness_key(name)] = str(theirs.target)


def witness_problem(repo: pygit2.Repository, name: str) -> str | None:
    """What is wrong with the remote's ``main`` as last fetched, or None."""
    seen = witness(repo, name)
    if seen is None:
        return None
    theirs = repo.references.get(tracking(name, MAIN_REF))
    if theirs is None:
        return f"the remote {name!r} no longer has a main branch; it held {seen[:10]} when this vault last synced"
    now = str(theirs.target)
    if now == seen:
        return None
    try:
        contains = descends(repo, pygit2.Oid(hex=now), pygit2.Oid(hex=seen))
    except (pygit2.GitError, ValueError, KeyError, IntegrityError):
        contains = False
    if contains:
        return None
    return (
        f"the remote {name!r} holds main at {now[:10]}, which does not contain {seen[:10]}, the version it held "
        "when this vault last synced: its history was rewritten or cut short on the server"
    )


def foreign_main(repo: pygit2.Repository, name: str, outcome: str) -> None:
    """VaultError if the remote's ``main``, as fetched last, is no vault's
    history: it shares no version with this vault's ``main`` and its newest
    commit carries no vaultmem-seal (a hosted repository made with a README
    or a licence, another project's).  A commit without a seal on top of the
    vault's own history is a pull's finding (:func:`check_commits`)."""
    theirs = repo.references.get(tracking(name, MAIN_REF))
    if theirs is None:
        return
    tip = pygit2.Oid(hex=str(theirs.target))
    try:
        if repo.odb.read_header(tip)[0] != ObjectType.COMMIT or split_seal(repo.odb.read(tip)[1])[1] is not None:
            return
        local = repo.references.get(MAIN_REF)
        if local is not None and merge_base(repo, pygit2.Oid(hex=str(local.target)), tip) is not None:
            return
    except (pygit2.GitError, KeyError, ValueError):
        return  # what is missing or damaged: the pull or push says so
    raise VaultError(
        f"Error: the remote {name!r} is not a vault: its main holds commits made without vaultmem and none of "
        "this vault's (was the repository made with a README or a licence?); share the vault through an empty "
        f"repository. {outcome}"
    )


def unpushed(gitdir: Path, name: str) -> bool:
    """Whether this vault holds a branch at a version the remote did not
    hold when it was last fetched (after a pull: versions still to push)."""
    for ref in BRANCHES:
        try:
            mine = read_ref(gitdir, ref)
            theirs = read_ref(gitdir, tracking(name, ref))
        except Damaged:
            return True  # a push says what is wrong
        if mine is not None and mine != theirs:
            return True
    return False


def push(
    repo: pygit2.Repository,
    name: str,
    progress: Callable[[int, int], None] | None = None,
    keyring: Keyring | None = None,
) -> Transfer:
    """Push the three branches, never forcing.  A branch the server holds at
    a commit this vault does not descend from is refused before anything is
    sent: the caller pulls first.  Each branch moves on the server only from
    the commit this check saw: a push that lands meanwhile wins, and this one
    is refused.  Given the vault's ``keyring``, every commit the push would
    add is checked first, as a pull checks it: one made without the key
    (plain git committing or pushing into the vault) never leaves."""
    fetch(repo, name)
    foreign_main(repo, name, "Nothing was pushed.")
    result = Transfer(name)
    moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]] = []
    replaced: set[str] = set()  # a keyring an erasure replaced: the one move that is not a fast-forward
    for ref in PUSH_ORDER:
        local = repo.references.get(ref)
        if local is None:
            continue
        theirs = repo.references.get(tracking(name, ref))
        forced = False
        if theirs is not None:
            if theirs.target == local.target:
                continue
            mine, their_tip = pygit2.Oid(hex=str(local.target)), pygit2.Oid(hex=str(theirs.target))
            forced = ref == KEYRING_REF and replaces(repo, mine, their_tip)
            if not forced and not descends(repo, mine, their_tip):
                # a keyring with no version in common that a pull would refuse too: say so now
                unrelated = ref == KEYRING_REF and merge_base(repo, mine, their_tip) is None
                if unrelated and not same_vault(repo, mine, their_tip):
                    raise ConflictError(
                        f"Error: the remote {name!r} holds a {short_name(ref)} with no version in common with "
                        "this vault's: it is another vault, or its history was replaced. Nothing was pushed."
                    )
                raise ConflictError(
                    f"Error: the remote {name!r} holds versions of {short_name(ref)} this vault does not have; "
                    "pull first. Nothing was pushed."
                )
        old = pygit2.Oid(hex=str(theirs.target)) if theirs is not None else None
        moves.append((ref, old, pygit2.Oid(hex=str(local.target))))
        if forced:
            replaced.add(ref)
        result.moved[short_name(ref)] = (str(old) if old is not None else None, str(local.target))
    if not moves:
        return result
    if keyring is not None:
        check_outgoing(repo, name, moves, keyring)
    order = [short_name(ref) for ref in BRANCHES]  # reported main first, as everywhere
    result.moved = dict(sorted(result.moved.items(), key=lambda item: order.index(item[0])))
    remote = _remote(repo, name)
    server = local_path(remote.url or "")
    try:
        if server is None:
            # A git server: receive-pack moves each ref only from the id this push
            # names (the one checked above), under its lock; no '+': never forced,
            # but for a keyring an erasure replaced (the server must allow that).
            specs = [f"{'+' if ref in replaced else ''}{ref}:{ref}" for ref, _, _ in moves]
            _send(repo, name, specs, progress, forced=replaced)
        else:
            _push_local(repo, name, server, moves, progress, replaced)
    except ConflictError:
        raise
    except VaultError as err:
        if replaced:
            raise VaultError(
                f"{err.fact} The keyring on {name!r} must be replaced after an erasure: let this remote "
                'accept a forced update of refs/heads/vaultmem-keyring (docs/erasure.md, "Clones and servers").'
            ) from err
        raise
    if server is not None and replaced:
        _prune_server_keyrings(server, moves)
    # The push has landed: the tracking refs now learn what the server holds.
    # If that fails here (a full disk), the push still stands, and the next
    # sync's fetch catches up.
    with contextlib.suppress(VaultError):
        fetch(repo, name)
        remember(repo, name)
    return result


# What libgit2 says when the server's branch moved past the id this push
# checked (another host's push landed in between): the push is not a
# fast-forward any more, and nothing was sent.
_BEHIND = ("contains commits that are not present locally", "non-fastforwardable", "non-fast-forward")
# Why a git server refuses a branch that moved since this push checked it
# (git's receive-pack): a pull, then a push again, settles these; any other
# refusal (a hook, a checked-out branch, missing objects) is the server's rule.
_RACED = ("non-fast-forward", "fetch first", "failed to lock", "failed to update ref", "cannot lock", "stale info")


def _send(
    repo: pygit2.Repository,
    name: str,
    specs: list[str],
    progress: Callable[[int, int], None] | None,
    forced: set[str] | None = None,
) -> None:
    """Push ``specs``; ``forced`` names the refs sent as a forced update (a
    keyring an erasure replaced): the server refusing one of those is its
    rule, never a reason to pull."""
    callbacks = _Callbacks(progress)
    remote = _remote(repo, name)
    _bounded()
    try:
        with callbacks.ctrl_c:
            _past_incoming(lambda: remote.push(specs, callbacks=callbacks))
    except (pygit2.GitError, OSError) as err:
        if any(words in str(err) for words in _BEHIND):
            raise ConflictError(
                f"Error: the remote {name!r} received other versions during this push; pull first. Nothing was pushed."
            ) from err
        raise _transport_error(name, err) from err
    if callbacks.refused:
        shown = "; ".join(f"{short_name(ref)}: {why}" for ref, why in callbacks.refused.items())
        raced = all(any(words in why for words in _RACED) for why in callbacks.refused.values())
        if raced and not (forced and forced & callbacks.refused.keys()):
            raise ConflictError(f"Error: the remote {name!r} refused the push ({shown}); pull first.")
        # The server's own rule (a hook, a checked-out branch, a shallow
        # history it cannot take), not versions this vault lacks: a pull
        # changes nothing, so this is no conflict to retry.
        said = callbacks.server_said()
        if said:
            shown += f"; the server said: {said}"
        hook = any("hook declined" in why for why in callbacks.refused.values())
        raise VaultError(
            f"Error: the remote {name!r} refused the push"
            + (": a hook on the server declined it" if hook else "")
            + f" ({shown}). A pull does not change this: see what that server accepts."
        )


def local_path(url: str) -> Path | None:
    """The folder of a remote on this machine (a path or a ``file://`` URL),
    None for a server reached over a network transport."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme or _SCP_LIKE.match(url):
        return None
    return Path(url)


_SCP_LIKE = re.compile(r"^[^/]+:")  # user@host:path, which git reads as ssh


INCOMING = "refs/vaultmem-incoming"


def _push_local(
    repo: pygit2.Repository,
    name: str,
    server: Path,
    moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]],
    progress: Callable[[int, int], None] | None,
    replaced: set[str] | None = None,
) -> None:
    """A push to a repository on this machine, as git's receive-pack makes
    it.  libgit2's local transport would overwrite the server's ref whatever
    it held by then, so a push that landed meanwhile would be lost: here
    libgit2 only sends the objects (to new refs of this push's own under
    ``refs/vaultmem-incoming``, which keep them from the server's gc), the
    server's file system is synced, then each branch moves under git's ref
    lock, only from the id checked, and the incoming refs go.  What
    receive-pack would refuse is refused before anything is sent: a forced
    update (``replaced``, a keyring an erasure replaced) where the server
    sets ``receive.denyNonFastForwards``, and any push where the server has
    hooks a push runs, which this one cannot run (see :func:`_server_hooks`)."""
    shown = os.path.abspath(server)
    if _working_copy(server):
        raise VaultError(
            f"Error: the remote {name!r} ({shown}) is a working copy, a repository with "
            "checked-out files, which a push does not update; a server is a bare repository (`git init --bare`). "
            "Nothing was pushed."
        )
    hooks = _server_hooks(server)
    unrun = [hook for hook in hooks if hook in _UNRUN_HOOKS]
    if unrun:
        raise VaultError(
            f"Error: the remote {name!r} ({shown}) has a {' and '.join(unrun)} hook, which a push to a path or "
            "file:// cannot run as git's receive-pack runs it; reach that repository through a git server (ssh://, "
            "or git daemon or http with receive-pack on), which runs it. Nothing was pushed."
        )
    if replaced and _server_config(server, "receive.denyNonFastForwards") in _TRUE:
        forced = ", ".join(short_name(ref) for ref in sorted(replaced))
        raise VaultError(
            f"Error: the remote {name!r} refused the push ({forced}: its receive.denyNonFastForwards refuses every "
            "forced update, as it refuses git's own push). Nothing was pushed."
        )
    lines = "".join(f"{_hex(old)} {new} {ref}\n" for ref, old, new in moves)  # as receive-pack hands them
    _clear_stale_incoming(server)
    token = server / INCOMING / f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
    staged = {ref: f"{token.relative_to(server)}/{short_name(ref)}" for ref, _, _ in moves}
    shared = _shared_perm(server)
    try:
        if shared is not None:  # made here, so that the group's other members can push beside this one
            with contextlib.suppress(OSError):
                token.mkdir(parents=True, exist_ok=True)
            _share(token.parent, shared)
            _share(token, shared)
        _send(repo, name, [f"{ref}:{staged[ref]}" for ref, _, _ in moves], progress)
        if shared is not None:  # the packs libgit2 wrote, as the server's user's umask left them
            with contextlib.suppress(OSError):
                for entry in os.scandir(server / "objects" / "pack"):
                    _share(Path(entry.path), shared)
        if "pre-receive" in hooks:
            _run_hook(name, server, "pre-receive", [], lines)
        for ref, old, new in moves:
            if "update" in hooks:
                _run_hook(name, server, "update", [ref, _hex(old), str(new)], "")
        _move_branches(name, server, token, moves, shared)
    finally:
        _remove_incoming(token)
    # after the push, as receive-pack runs them: what they say or do changes nothing of it
    with contextlib.suppress(VaultError):
        if "post-receive" in hooks:
            _run_hook(name, server, "post-receive", [], lines)
        if "post-update" in hooks:
            _run_hook(name, server, "post-update", [ref for ref, _, _ in moves], "")


_TRUE = ("true", "yes", "on", "1")
# What git's receive-pack runs for a push (githooks(5)); a push to a path
# moves the branches itself and runs none of them.
RECEIVE_HOOKS = ("pre-receive", "update", "proc-receive", "reference-transaction", "post-receive", "post-update")


# Hooks a push to a path does not run (refused): a proc-receive hook takes
# over the refs' update, a reference-transaction hook votes on git's own.
_UNRUN_HOOKS = ("proc-receive", "reference-transaction")


def _hex(oid: pygit2.Oid | None) -> str:
    """An id as a hook is given it: all zeros for a branch that is new."""
    return str(oid) if oid is not None else "0" * 40


# The variables that name the pushing side's repository (git's local_repo_env):
# a hook runs in the server's.
_PUSHER_ENV = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)


def _run_hook(name: str, server: Path, hook: str, args: list[str], stdin: str) -> None:
    """Run the server's ``hook`` as git's receive-pack runs it (in the
    repository's folder, ``GIT_DIR=.``, the ref updates on its standard input
    or as its arguments), bounded as a network step is; VaultError naming
    what it said if it declines (exits non-zero)."""
    env = {key: value for key, value in os.environ.items() if key not in _PUSHER_ENV}
    env["GIT_DIR"] = "."
    try:
        done = subprocess.run(
            [str(_hooks_folder(server) / hook), *args],
            input=stdin.encode("ascii"),
            cwd=server,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=network_timeout(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        said, failed = f"it did not finish within {network_timeout():g} s", True
    except OSError as err:
        said, failed = (err.strerror or str(err)).lower(), True
    else:
        said, failed = done.stdout.decode("utf-8", "replace"), done.returncode != 0
    if not failed:
        return
    lines = ["".join(c for c in line if c.isprintable()).strip() for line in said.replace("\r", "\n").split("\n")]
    shown = "; ".join(line for line in lines if line)
    shown = shown if len(shown) <= 500 else shown[:499] + "\u2026"
    which = short_name(args[0]) + ": " if hook == "update" else ""
    raise VaultError(
        f"Error: the remote {name!r} refused the push: a hook on the server declined it ({which}{hook} hook "
        f"declined{'; the server said: ' + shown if shown else ''}). A pull does not change this: see what that "
        "server accepts. Nothing was pushed."
    )


def _server_config(server: Path, key: str) -> str | None:
    """``key`` in the configuration git reads for the repository at
    ``server`` (its own config, then the user's and the system's), lowered."""
    try:
        there = pygit2.Repository(str(server), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return None
    try:
        return str(there.config[key]).strip().lower()
    except (KeyError, pygit2.GitError, ValueError):
        return None
    finally:
        there.free()


def _server_hooks(server: Path) -> list[str]:
    """The hooks git's receive-pack would run for a push into ``server``:
    executable files of those names in its hooks folder (``hooks/``, or
    ``core.hooksPath``, relative to the repository as git takes it)."""
    folder = _hooks_folder(server)
    return [hook for hook in RECEIVE_HOOKS if (folder / hook).is_file() and os.access(folder / hook, os.X_OK)]


def _hooks_folder(server: Path) -> Path:
    folder = server / "hooks"
    try:
        there = pygit2.Repository(str(server), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return folder
    try:
        with contextlib.suppress(KeyError, pygit2.GitError, ValueError):
            folder = server / os.path.expanduser(str(there.config["core.hooksPath"]))
    finally:
        there.free()
    return folder


def _working_copy(server: Path) -> bool:
    """Whether the repository at ``server`` has a work tree (made by `git
    init` without ``--bare``, or a plain `git clone`)."""
    try:
        there = pygit2.Repository(str(server), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return False  # the push says what is wrong
    try:
        return not there.is_bare
    finally:
        there.free()


def _prune_server_keyrings(server: Path, moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]]) -> None:
    """On a server on this machine, remove the keyring an erasure replaced
    (best effort: the push has landed; the next push tries again)."""
    with contextlib.suppress(Exception):
        there = pygit2.Repository(str(server), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        try:
            for ref, old, new in moves:
                if ref == KEYRING_REF and old is not None:
                    doomed = keyring_objects(there, [old]) - keyring_objects(there, [new])
                    prune.drop(server, doomed, there)
        finally:
            there.free()


def _move_branches(
    name: str,
    server: Path,
    token: Path,
    moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]],
    shared: tuple[int, bool] | None = None,
) -> None:
    pushed: list[str] = []
    try:
        _move_each(name, server, token, moves, shared, pushed)
    except VaultError as err:
        if not pushed:
            raise
        # the branches before it stand on the server: "Nothing was pushed" would not be true
        fact = err.fact
        for said in (" Nothing was pushed.", " Nothing more was pushed.", " Nothing was changed."):
            fact = fact.removesuffix(said)
        done = f"{' and '.join(pushed)} {'were' if len(pushed) > 1 else 'was'} pushed before it stopped"
        raise type(err)(f"{fact} {done}; nothing more was.", step=err.step) from err


def _move_each(
    name: str,
    server: Path,
    token: Path,
    moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]],
    shared: tuple[int, bool] | None,
    pushed: list[str],
) -> None:
    """Move each branch in turn; ``pushed`` names those that moved."""
    try:
        durable.sync_filesystem(server)  # the objects, before a ref names them
        moved: set[str] = set()
        for ref, old, new in moves:
            target = _branch_behind(name, server, ref)
            if target in moved:  # two of the vault's branches an alias of one: neither may move it twice
                raise IntegrityError(
                    f"Error: the remote {name!r} holds {short_name(ref)} as a symbolic ref to {short_name(target)}, "
                    "which another branch of the vault names too. Nothing more was pushed."
                )
            moved.add(target)
            # The lock's content, made and synced first; the lock is then a
            # second name of this file, so a push killed holding it leaves a
            # lock the next push from this machine can prove its own.
            made = token / f"{LOCKING}{short_name(target)}"
            _write_synced(made, f"{new}\n".encode("ascii"))
            _share(made, shared)  # the branch's file once moved into place
            _move_server_ref(name, server, target, old, made, new)
            pushed.append(short_name(ref))
    except OSError as err:
        raise _transport_error(name, err) from err


LOCKING = "locking-"
_SYMREF = re.compile(rb"ref: (refs/heads/[A-Za-z0-9_][A-Za-z0-9_.-]*)\n?")


def _branch_behind(name: str, server: Path, ref: str) -> str:
    """The branch a push of ``ref`` moves on the server: ``ref`` itself, or
    the branch its file names when it is a symbolic ref (``ref:
    refs/heads/trunk``, an alias a server keeps after a rename), followed
    as git's receive-pack follows it (up to 5 links).  A symbolic ref to
    another of the vault's branches is refused: the push would move that
    one."""
    seen = ref
    for _ in range(5):
        try:
            with open(server / seen, "rb") as fh:
                data = fh.read(300)
        except OSError:
            return seen  # no file (packed, or new), or unreadable: the move says what is wrong
        found = _SYMREF.fullmatch(data)
        if found is None:
            return seen
        target = found.group(1).decode("ascii")
        if target.endswith(".lock") or ".." in target:
            return seen
        if target in BRANCHES:
            raise IntegrityError(
                f"Error: the remote {name!r} holds {short_name(ref)} as a symbolic ref to {short_name(target)}, "
                f"another branch of the vault; make {short_name(ref)} a branch of its own on the server. "
                "Nothing was pushed."
            )
        seen = target
    return seen


def _remove_incoming(folder: Path) -> None:
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    for empty in (folder, folder.parent):
        with contextlib.suppress(OSError):
            empty.rmdir()


_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _clear_stale_incoming(server: Path) -> None:
    """Remove what a push from this machine left when it was killed (its
    process is gone): its incoming refs, and a ref lock it held, known by the
    id it was writing; other machines' are theirs to remove."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(server / INCOMING):
            parts = entry.name.split("-")  # HOST-PID-RANDOM; HOST holds no "-"
            if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit() or _alive(int(parts[1])):
                continue
            for staged in os.scandir(entry.path):
                if staged.name.startswith(LOCKING):
                    _clear_own_lock(server / "refs" / "heads" / (staged.name[len(LOCKING) :] + ".lock"), staged.path)
            _remove_incoming(Path(entry.path))


def _clear_own_lock(lock: Path, made: str) -> None:
    """Remove ``lock`` if it is the killed push's own: another name of the
    file that push made for it (any other lock, git's included, stays)."""
    with contextlib.suppress(OSError):
        if os.path.samefile(lock, made):
            lock.unlink()


def _shared_perm(server: Path) -> tuple[int, bool] | None:
    """What the server's ``core.sharedRepository`` asks of the files a push
    makes there, as git reads it: (the bits, whether they replace the file's
    own), or None when it asks for nothing (each user's umask stands)."""
    try:
        value = str(pygit2.Config(str(server / "config"))["core.sharedRepository"]).strip().lower()
    except (KeyError, pygit2.GitError, OSError, ValueError):
        return None
    if value in ("group", "true", "yes", "on", "1"):
        return 0o660, False
    if value in ("all", "world", "everybody", "2"):
        return 0o664, False
    if re.fullmatch(r"0[0-7]{1,4}", value) and int(value, 8) & 0o600 == 0o600:
        return int(value, 8) & 0o666, True
    return None


def _share(path: Path, shared: tuple[int, bool] | None) -> None:
    """Give ``path`` the permissions a shared repository asks for, as git's
    ``adjust_shared_perm`` does: read-only files stay read-only, folders
    get the matching search bits and keep their group for what is made in
    them.  Best effort: a file another user owns keeps its mode."""
    if shared is None:
        return
    tweak, replaces = shared
    with contextlib.suppress(OSError):
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return
        if not mode & stat.S_IWUSR:
            tweak &= ~0o222
        if mode & stat.S_IXUSR:
            tweak |= (tweak & 0o444) >> 2
        wanted = (stat.S_IMODE(mode) & ~0o777 | tweak) if replaces else (stat.S_IMODE(mode) | tweak)
        if stat.S_ISDIR(mode):
            wanted |= (wanted & 0o444) >> 2 | stat.S_ISGID
        if wanted != stat.S_IMODE(mode):
            os.chmod(path, wanted)


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _move_server_ref(
    name: str, server: Path, ref: str, old: pygit2.Oid | None, made: Path, new: pygit2.Oid | None = None
) -> None:
    """Move ``ref`` in the repository ``server`` from ``old`` to the id in
    ``made`` (a synced file) as git does: its ``.lock`` taken exclusively (a
    hard link to ``made``: the lock is whole from its first instant), the ref
    re-read under it, the server's reflog written if it keeps one, then the
    lock renamed into place."""
    path = server / ref
    lock = path.with_name(path.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(made, lock)
    except FileExistsError:
        raise ConflictError(
            f"Error: another program is updating {short_name(ref)} on the remote {name!r}; pull, then push again."
        ) from None
    except OSError as err:
        raise _transport_error(name, err) from err
    try:
        try:
            current = read_ref(server, ref)
        except Damaged as err:
            raise IntegrityError(f"Error: the remote {name!r} holds a damaged {short_name(ref)}.") from err
        expected = bytes.fromhex(str(old)) if old is not None else None
        if current != expected:
            raise ConflictError(
                f"Error: the remote {name!r} received other versions of {short_name(ref)} during this push; "
                "pull first. Nothing was pushed."
            )
        if new is not None:
            _log_server_ref(server, ref, old, new)
        os.rename(lock, path)
        durable.sync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        raise


def _log_server_ref(server: Path, ref: str, old: pygit2.Oid | None, new: pygit2.Oid) -> None:
    """Append the move to the server's reflog for ``ref``, as git's
    receive-pack would: when that reflog exists, or the server's
    ``core.logAllRefUpdates`` asks for one (``always``; ``true`` for branches).
    Best effort, under the ref's lock: a reflog is a record, never the ref."""
    log = server / "logs" / ref
    with contextlib.suppress(OSError, pygit2.GitError, ValueError):
        if not log.exists():
            try:
                wanted = str(pygit2.Config(str(server / "config"))["core.logAllRefUpdates"]).strip().lower()
            except KeyError:
                return
            if wanted != "always" and not (wanted in ("true", "yes", "on", "1") and ref.startswith("refs/heads/")):
                return
            shared = _shared_perm(server)
            for folder in reversed(log.relative_to(server).parents[:-1]):
                if not (server / folder).exists():
                    (server / folder).mkdir(exist_ok=True)
                    _share(server / folder, shared)
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
            _share(log, shared)
        zero = "0" * len(str(new))
        line = f"{old if old is not None else zero} {new} vaultmem <vaultmem@{_HOST}> {int(time.time())} +0000\tpush\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)


def still_to_push(repo: pygit2.Repository, result: Transfer, *, replaced: bool = False) -> None:
    """Record on a pull's ``result`` which of this vault's branches the
    remote, as fetched, lacks (``absent``: a keyring branch deleted on the
    server, say) or holds at an older version (``ahead``): then the two do
    not agree, though the pull moved nothing.  ``replaced``: the remote holds
    a keyring this vault replaced (an erasure, a migration), whose copy the
    pull removed with its tracking ref: older, not absent."""
    absent, ahead = [], []
    for ref in BRANCHES:
        local, theirs = incoming(repo, result.remote, ref)
        if replaced and ref == KEYRING_REF:
            ahead.append(short_name(ref))
        elif local is not None and theirs is None:
            absent.append(short_name(ref))
        elif local is not None and local != theirs:
            ahead.append(short_name(ref))
    result.absent, result.ahead = tuple(absent), tuple(ahead)


def incoming(repo: pygit2.Repository, name: str, ref: str) -> tuple[pygit2.Oid | None, pygit2.Oid | None]:
    """(this vault's tip, the remote's tip) of ``ref`` after a fetch."""
    found = [repo.references.get(ref), repo.references.get(tracking(name, ref))]
    local, theirs = (pygit2.Oid(hex=str(r.target)) if r is not None else None for r in found)
    return local, theirs


def relation(repo: pygit2.Repository, name: str, ref: str, local: pygit2.Oid | None, theirs: pygit2.Oid | None) -> str:
    """What a pull does with ``ref``: ``"none"`` (the remote has nothing this
    vault lacks), ``"advance"`` (move forward to the remote's tip) or
    ``"merge"`` (both sides added commits since they last agreed; for
    ``main`` and the policy, perhaps since the start: two clones of a vault
    that had no version yet).  Keyrings with no commit in common belong to
    two vaults: refused."""
    if theirs is None or theirs == local:
        return "none"
    if local is None or descends(repo, theirs, local):
        return "advance"
    if descends(repo, local, theirs):
        return "none"  # this vault is ahead: push
    if merge_base(repo, local, theirs) is None and ref == KEYRING_REF:
        if same_vault(repo, local, theirs):
            return "merge"  # format 2: an erasure on one side made its keyring a new root
        raise ConflictError(
            f"Error: the remote {name!r} holds a {short_name(ref)} with no version in common with this vault's: "
            "it is another vault, or its history was replaced. Nothing was changed."
        )
    return "merge"


def _ring_doc(repo: pygit2.Repository, oid: pygit2.Oid) -> dict[str, Any] | None:
    try:
        return Keyring.parse(keyring_blob(repo, oid))
    except VaultError:
        return None


def _ids(doc: dict[str, Any]) -> set[str]:
    entries = [*doc.get("data_keys", []), *(doc.get("epochs") or [])]
    return {str(entry.get("id")) for entry in entries if isinstance(entry, dict)}


def same_vault(repo: pygit2.Repository, local: pygit2.Oid, theirs: pygit2.Oid) -> bool:
    """Whether two keyrings with no commit in common are one vault's: they
    share a key, and at least one is in format 2 (an erasure or a migration
    made it a new root)."""
    mine, other = _ring_doc(repo, local), _ring_doc(repo, theirs)
    if mine is None or other is None:
        return False
    if mine.get("vaultmem_format", 1) < 2 and other.get("vaultmem_format", 1) < 2:
        return False
    return bool(_ids(mine) & _ids(other))


def replaces(repo: pygit2.Repository, local: pygit2.Oid, theirs: pygit2.Oid) -> bool:
    """Whether this vault's keyring may replace the remote's although it does
    not descend from it: a format 2 keyring that an erasure made a new root,
    holding every key the remote's holds (or its erasure: every erasure the
    remote's records, this one records too).  A pull merges first, so this
    holds after a pull."""
    mine, other = _ring_doc(repo, local), _ring_doc(repo, theirs)
    if mine is None or other is None or mine.get("vaultmem_format", 1) < 2:
        return False
    try:
        root = not repo[local].peel(pygit2.Commit).parent_ids
    except (KeyError, ValueError, pygit2.GitError):
        return False
    erased_mine, erased_other = mine.get("erased") or {}, other.get("erased") or {}
    return root and _ids(mine) >= _ids(other) and set(erased_mine) >= set(erased_other)


def check_keyring(
    repo: pygit2.Repository,
    theirs: pygit2.Oid,
    keyring: Keyring,
    new_user_key: Callable[[dict[str, Any] | None], UserKey] | None = None,
) -> Keyring:
    """The remote's keyring, unlocked with this vault's key (or, after a key
    change on another clone, with the new key ``new_user_key`` makes from the
    keyring's protector) and authenticated by its MAC; IntegrityError or
    WrongKeyError otherwise."""
    doc = Keyring.parse(keyring_blob(repo, theirs))
    user_key = new_user_key(doc.get("protector")) if new_user_key is not None else keyring.user_key
    try:
        pulled = Keyring.unlock(doc, user_key)
    except WrongKeyError as err:
        if new_user_key is not None:
            raise WrongKeyError(
                "Error: the new key given does not open the remote's keyring. Nothing was changed."
            ) from err
        raise WrongKeyError(
            "Error: the remote's keyring does not open with this vault's key (the key was changed on another "
            "clone). Nothing was changed.",
            step="new-key",
        ) from err
    if not pulled.intact:
        raise IntegrityError(
            "Error: the remote's keyring fails its check under the vault's key (altered on the server?). "
            "Nothing was changed."
        )
    return pulled


def check_commits(
    repo: pygit2.Repository,
    local: pygit2.Oid | None,
    theirs: pygit2.Oid,
    keyring: Keyring,
    outcome: str = "Nothing was changed.",
) -> int:
    """Every commit ``theirs`` adds to ``local`` must carry a seal under the
    vault's keys (a commit made on the server without the key is refused);
    returns how many it adds.  A branch that names no commit at all (a blob
    or a tree written into the ref file on the server) is refused the same way."""
    kind = repo.odb.read_header(theirs)[0] if repo.odb.exists(theirs) else None
    if kind != ObjectType.COMMIT:
        what = "an object this vault does not have" if kind is None else f"a {ObjectType(kind).name.lower()}"
        raise IntegrityError(
            f"Error: the remote's branch names {str(theirs)[:10]}, {what}, not a version; "
            f"the server's copy may have been altered. {outcome}"
        )
    count = 0
    try:
        for commit in added_since(repo, theirs, local):  # the parents commits record: a grafts file hides none
            raw = repo.odb.read(commit.id)[1]
            body, seal = split_seal(raw)
            problem = "it carries no vaultmem-seal" if seal is None else keyring.check_commit_seal(seal, body)
            if problem:
                raise IntegrityError(
                    f"Error: the remote's commit {str(commit.id)[:10]} was not made with this vault's key "
                    f"({problem}); the server's copy may have been altered. {outcome}"
                )
            count += 1
    except KeyError as err:  # pygit2's NotFoundError: a version the server did not send
        missing = re.search(r"[0-9a-f]{40}", str(err))
        which = f" ({missing.group(0)[:10]})" if missing else ""
        raise IntegrityError(
            f"Error: the remote's history of {str(theirs)[:10]} is incomplete: a version it builds on{which} is "
            f"missing (is the server a shallow copy, made with `git clone --depth`?). {outcome}"
        ) from None
    return count


def check_outgoing(
    repo: pygit2.Repository, name: str, moves: list[tuple[str, pygit2.Oid | None, pygit2.Oid]], keyring: Keyring
) -> None:
    """Every commit a push adds to the server's sealed branches must carry a
    seal under the vault's keys: a commit plain git made in the vault (its
    content may be plaintext) is refused here, before anything is sent."""
    for ref, old, new in moves:
        if ref not in SEALED_REFS:
            continue
        for commit in added_since(repo, new, old):
            body, seal = split_seal(repo.odb.read(commit.id)[1])
            problem = "it carries no vaultmem-seal" if seal is None else keyring.check_commit_seal(seal, body)
            if problem:
                raise IntegrityError(
                    f"Error: this vault's {short_name(ref)} holds commit {str(commit.id)[:10]}, not made with the "
                    f"vault's key ({problem}; written by plain git?), so it is not sent to the remote {name!r}; "
                    "run `vaultmem verify`. Nothing was pushed."
                )


# The branches whose every commit vaultmem seals (the keyring is checked by its MAC).
SEALED_REFS = (MAIN_REF, POLICY_REF, SHADOWS_REF, SIGNERS_REF, CHECKPOINTS_REF)


def advance(commits: CommitPath, ref: str, local: pygit2.Oid | None, theirs: pygit2.Oid) -> None:
    """Move ``ref`` forward to ``theirs`` through the commit path (the caller
    holds the writer lock)."""
    try:
        current = read_ref(commits.gitdir, ref)
    except Damaged as err:
        raise VaultError(f"Error: the vault's {ref} is damaged; run `vaultmem verify`.") from err
    expected = bytes.fromhex(str(local)) if local is not None else None
    if current != expected:
        raise ConflictError(f"Error: {short_name(ref)} moved while the pull ran; pull again. Nothing was changed.")
    commits.advance(ref, expected, bytes.fromhex(str(theirs)))


def clone(
    url: str,
    path: Path,
    configure: Callable[[Path], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Clone ``url`` into ``path`` (which must be missing or empty) as a bare
    repository holding the vault's three branches.  Made in a folder beside
    ``path`` and renamed into place, so a failed clone leaves nothing."""
    check_url(url)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise VaultError(f"Error: {path} exists and is not an empty folder; choose a new folder for the clone.")
    with contextlib.suppress(OSError):
        if path.exists() and os.path.samefile(path, os.getcwd()):
            # the clone is made beside the folder and takes its place: this
            # program and the shell it runs in would be left in a removed folder
            name = os.path.basename(os.path.abspath(path))
            raise VaultError(
                f"Error: {path} is the current folder, which the clone would replace; run the clone from the "
                f"folder above it (`cd ..`, then `vaultmem clone URL {name}`). Nothing was made."
            )
    server = local_path(url)
    if server is not None and not server.is_dir():
        raise VaultError(
            f"Error: cannot clone {url}: no repository at {os.path.abspath(server)}{_a_file(server)}. Nothing was made."
        )
    # a path is stored absolute, as `remote add` stores it: the clone finds its server from any folder
    stored = os.path.abspath(url) if server is not None and not url.startswith("file:") else url
    _bounded()
    made: list[Path] = []  # the folders above the clone this clone makes, deepest first: a failure removes them
    above = Path(os.path.abspath(path.parent))
    while not above.exists() and above != above.parent:
        made.append(above)
        above = above.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(os.path.join(path.parent, f".{path.name}.clone-{os.getpid()}"))
    shutil.rmtree(work, ignore_errors=True)
    _clear_killed_clones(path)

    ctrl_c = _CtrlC()

    def cloned() -> pygit2.Repository:
        # The vault's branches only, as a pull takes them: not the server's
        # other branches and tags (what else the server holds is no part of
        # the vault, and may hold anything, plaintext included).
        shutil.rmtree(work, ignore_errors=True)
        made = pygit2.init_repository(str(work), bare=True, initial_head="main")
        made.remotes.create("origin", stored, "+refs/heads/*:refs/remotes/origin/*")
        specs = [f"+{ref}:{tracking('origin', ref)}" for ref in BRANCHES]
        _remote(made, "origin").fetch(specs, callbacks=_Callbacks(progress, ctrl_c))
        return made

    try:
        try:
            with ctrl_c:
                repo = _past_incoming(cloned)
        except (pygit2.GitError, OSError, ValueError) as err:
            raise VaultError(f"Error: cannot clone {url}: {_silence(err)}. Nothing was made.") from err
        for ref in BRANCHES:  # whatever the server's HEAD names, the vault's three branches
            theirs = repo.references.get(tracking("origin", ref))
            if theirs is not None:
                repo.references.create(ref, theirs.target, force=True)
        repo.set_head(MAIN_REF)
        remember(repo, "origin")
        if not any(repo.references.get(ref) is not None for ref in BRANCHES):
            # an empty repository, made for the vault on a server: the first host pushes to it
            raise VaultError(
                f"Error: {url} holds no vault yet (no main, no vaultmem keyring branch): push one to it first "
                "(`vaultmem remote add origin URL`, then `vaultmem push`, on the host that holds it). "
                "Nothing was made."
            )
        if repo.references.get(KEYRING_REF) is None:
            raise VaultError(f"Error: {url} is not a vault: it has no vaultmem keyring branch. Nothing was made.")
        repo.config["core.logAllRefUpdates"] = "false"
        repo.config["gc.auto"] = "0"
        with contextlib.suppress(VaultError, KeyError):
            doc = Keyring.parse(keyring_blob(repo, repo.references[KEYRING_REF].target))
            repo.config["vaultmem.format"] = str(doc["vaultmem_format"])
        repo.config["receive.denyNonFastForwards"] = "true"
        (work / durable.STATE_DIR).mkdir(mode=0o700, exist_ok=True)
        if configure is not None:
            configure(work)  # opens it: a wrong key stops here
        durable.sync_filesystem(work)
        if path.exists():
            path.rmdir()
        os.rename(work, path)
        durable.sync_dir(path.parent)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only while empty: never what another program put there meanwhile
        raise
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    return path


def _clear_killed_clones(path: Path) -> None:
    """Remove the folders a clone into ``path`` left when it was killed
    (``.NAME.clone-PID`` beside it, its process gone): each holds a copy of
    the vault, its keyring included, that nothing else would ever remove."""
    prefix = f".{path.name}.clone-"
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            pid = entry.name[len(prefix) :]
            if not entry.name.startswith(prefix) or not pid.isdigit() or len(pid) > 10 or int(pid) == os.getpid():
                continue
            if entry.is_dir(follow_symlinks=False) and not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def check_clone(repo: pygit2.Repository, keyring: Keyring) -> None:
    """What a clone took is checked as a pull checks it: every commit of every
    branch sealed under the vault's keys (a commit made on the server without
    the key is refused), and every change of the signers list signed by an
    operator.  The caller opened the clone with its key (the keyring's MAC)."""
    for ref in SEALED_REFS:
        found = repo.references.get(ref)
        if found is None:
            continue
        tip = pygit2.Oid(hex=str(found.target))
        check_commits(repo, None, tip, keyring, "Nothing was made.")
        if ref == SIGNERS_REF:
            unsigned = signers_problems(repo, keyring, tip)
            if unsigned:
                bad, kind, detail = unsigned[0]
                raise IntegrityError(
                    f"Error: the signers list on the server has a change no operator signed (commit {bad[:12]}, "
                    f"{kind}: {detail}). Nothing was made."
                )
