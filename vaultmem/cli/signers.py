"""``vaultmem signer ...`` and ``vaultmem checkpoint``: signers and signed
checkpoints (docs/signing.md), each command's parser beside its handler.

A writer's signing key comes from ``--signing-key FILE`` or
``VAULTMEM_SIGNING_KEY`` (a key file's path, or the key itself); a key with
a passphrase opens with ``--signing-passphrase-file FILE`` or
``VAULTMEM_SIGNING_PASSPHRASE``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import getpass
import os
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

from vaultmem.cli.render import print_json, short
from vaultmem.core.crypto import check_new_passphrase, read_passphrase_file
from vaultmem.core.signers import Signer, Signers, check_principal, show_time
from vaultmem.core.signing import ENV_SIGNING_KEY, ENV_SIGNING_PASSPHRASE, PublicKey, SigningKey, resolve_signing_key
from vaultmem.core.values import is_unicode
from vaultmem.core.versions import parse_when
from vaultmem.errors import BadKeyError, VaultError
from vaultmem.repo.signed import read_signers

if TYPE_CHECKING:
    from vaultmem.vault import Vault

_Commands: TypeAlias = "argparse._SubParsersAction[Any]"


def signing_options(parser: argparse.ArgumentParser, default: object) -> None:
    """The options every command takes to sign what it writes."""
    taken = set(parser._option_string_actions)
    if "--signing-key" not in taken:
        parser.add_argument(
            "--signing-key",
            metavar="FILE",
            default=default,
            help=f"sign the commits made as --actor with this ed25519 key (or {ENV_SIGNING_KEY})",
        )
    if "--signing-passphrase-file" not in taken:
        parser.add_argument(
            "--signing-passphrase-file",
            metavar="FILE",
            default=default,
            help=f"file whose first line opens the signing key (or {ENV_SIGNING_PASSPHRASE})",
        )


def load_signing_key(args: argparse.Namespace) -> SigningKey | None:
    """The signing key the command line or the environment gives, or None."""
    passphrase = None
    if getattr(args, "signing_passphrase_file", None):
        passphrase = read_passphrase_file(args.signing_passphrase_file, ENV_SIGNING_PASSPHRASE)
    return resolve_signing_key(getattr(args, "signing_key", None) or None, passphrase)


# Commands that never write: a signing key given to them is not even opened
# (``log --actor`` filters; a key's passphrase is not needed to read).
READING = frozenset(
    {"ls", "cat", "log", "show", "diff", "verify", "find", "export", "textconv", "git-setup", "completion"}
)


def use_signing_key(vault: Vault, args: argparse.Namespace) -> None:
    """Sign this command's commits as its ``--actor`` when a key is given."""
    if args.command in READING or getattr(args, "signer_command", None) == "list":
        return
    if getattr(args, "policy_command", None) in ("show", "log") or getattr(args, "key_command", None) == "list":
        return
    actor = getattr(args, "actor", None)
    key = load_signing_key(args)
    if key is not None and actor:
        vault.sign_as(actor, key)


# -- parsers -----------------------------------------------------------------------


def add_parsers(commands: _Commands) -> None:
    signer = commands.add_parser("signer", help="make signing keys; add, rotate, revoke or list the vault's signers")
    subs = signer.add_subparsers(dest="signer_command", required=True, metavar="SIGNER_COMMAND")

    new = subs.add_parser("new", help="make a new ed25519 signing key in OpenSSH format (no vault needed)")
    new.add_argument("name", metavar="NAME", help="the signer's name, also its actor name")
    new.add_argument("--out", metavar="FILE", help="where to write the key (default NAME.key; FILE.pub beside it)")
    new.add_argument(
        "--new-passphrase-file", metavar="FILE", help="protect the key with the first line of FILE (mode 0600)"
    )
    # --passphrase (every command's option) asks for one here: typed twice, or a pipe's first line
    _json(new)

    add = subs.add_parser("add", help="let NAME sign with the public key in KEY (an operator's signed change)")
    add.add_argument("name", metavar="NAME", help="the signer's name: the actor its commits are recorded as")
    add.add_argument("key", metavar="KEY", help="its public key: a .pub file, or the line ssh-ed25519 AAAA...")
    add.add_argument("--operator", action="store_true", help="NAME may also add, rotate and revoke signers")
    add.add_argument("--valid-after", metavar="TIME", help="the key signs from this time on (default now)")
    add.add_argument("--valid-before", metavar="TIME", help="the key signs until this time (default: no end)")
    _operator(add)

    rotate = subs.add_parser("rotate", help="NAME signs with the public key in KEY from now on; its old key stops")
    rotate.add_argument("name", metavar="NAME", help="the signer whose key changes")
    rotate.add_argument("key", metavar="KEY", help="the new public key: a .pub file, or the line ssh-ed25519 AAAA...")
    _operator(rotate)

    revoke = subs.add_parser("revoke", help="NAME's keys stop signing now (all its signatures, with --compromised)")
    revoke.add_argument("name", metavar="NAME", help="the signer whose keys stop counting")
    revoke.add_argument("--key", metavar="KEY", help="revoke only this public key of NAME")
    revoke.add_argument(
        "--compromised", action="store_true", help="the key leaked: nothing it ever signed counts any more"
    )
    revoke.add_argument("--reason", metavar="TEXT", default="", help="recorded with the revocation")
    _operator(revoke)

    _json(subs.add_parser("list", help="every signer the vault ever had, with its key's validity"))

    checkpoint = commands.add_parser("checkpoint", help="sign where main stands now; keep the text outside the vault")
    checkpoint.add_argument("--out", metavar="FILE", help="also append the signed checkpoint to FILE")
    checkpoint.add_argument("--actor", metavar="NAME", default="cli", help="the signer (default cli)")
    _json(checkpoint)


def _json(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", action="store_true", help="print JSON for programs")


def _operator(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--actor", metavar="NAME", default="cli", help="the operator making the change (default cli)")
    sub.add_argument("--session", metavar="ID", help="session id recorded on the change")
    _json(sub)


EXAMPLES = {
    "signer new": "vaultmem signer new support-bot --out support-bot.key",
    "signer add": "vaultmem signer add support-bot support-bot.key.pub --actor ops-alice --signing-key ops-alice.key",
    "signer rotate": "vaultmem signer rotate support-bot new.key.pub --actor ops-alice --signing-key ops-alice.key",
    "signer revoke": "vaultmem signer revoke support-bot --compromised --actor ops-alice --signing-key ops-alice.key",
    "signer list": "vaultmem signer list --json",
    "checkpoint": "vaultmem checkpoint --actor ops-alice --signing-key ops-alice.key --out ~/vault.checkpoints",
}


# -- handlers ------------------------------------------------------------------------


def signer_new(args: argparse.Namespace) -> int:
    """``vaultmem signer new NAME``: needs no vault."""
    check_principal(args.name)
    out = Path(args.out or f"{args.name}.key")
    for path in (out, Path(f"{out}.pub")):
        if path.exists():
            raise VaultError(f"Error: {path} exists; choose another --out. Nothing was written.")
    passphrase = None
    if args.new_passphrase_file:
        passphrase = read_passphrase_file(args.new_passphrase_file, ENV_SIGNING_PASSPHRASE)
    elif os.environ.get(ENV_SIGNING_PASSPHRASE):
        passphrase = os.environ[ENV_SIGNING_PASSPHRASE]
    elif getattr(args, "passphrase", False):  # `signer new --passphrase`: asked for, as `init --passphrase` asks
        passphrase = _new_passphrase(args.name)
    if passphrase is not None:  # the rule holds however it is given; bytes not UTF-8 are measured as bytes
        check_new_passphrase(passphrase if is_unicode(passphrase) else os.fsencode(passphrase).decode("latin-1"))
    key = SigningKey.generate()
    line = key.save(out, passphrase, comment=args.name)
    if args.json:
        print_json(
            {
                "name": args.name,
                "key_file": str(out),
                "public_file": f"{out}.pub",
                "public": line,
                "fingerprint": key.public.fingerprint,
                "passphrase": passphrase is not None,
            }
        )
    else:
        print(f"Wrote the signing key {out} (mode 0600) and its public key {out}.pub:")
        print(f"  {line}")
        print(f"An operator adds it with: vaultmem signer add {args.name} {out}.pub")
    return 0


def _new_passphrase(name: str) -> str:
    """A new key's passphrase: typed twice at a terminal, else the first line of standard input."""
    if not sys.stdin.isatty():
        line = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
        if not line:
            raise BadKeyError("Error: no passphrase on standard input: its first line is read as the passphrase.")
        check_new_passphrase(line)
        return line
    try:
        first = getpass.getpass(f"New passphrase for {name}'s signing key: ")
        check_new_passphrase(first)
        if getpass.getpass("Repeat the passphrase: ") != first:
            raise BadKeyError("Error: the two passphrases differ; nothing was written.")
    except EOFError as err:
        raise BadKeyError("Error: no passphrase given; nothing was written.") from err
    return first


def _read_public(text: str) -> PublicKey:
    """KEY as ``signer add`` takes it: the line ``ssh-ed25519 AAAA...`` itself,
    or a file holding it (such as ``ssh-bot.key.pub``, whose name starts like a line).
    A private key given here is refused as such, and never shown."""
    if _PRIVATE_KEY in text:
        raise BadKeyError(_PRIVATE_GIVEN.format(what="the key given"))
    if text.startswith("ssh-") and len(text.split()) >= 2:
        return PublicKey.from_line(text)
    try:
        st = os.stat(text)
    except OSError as err:
        raise BadKeyError(f"Error: cannot read the public key {text}: {err.strerror}.") from err
    if not stat.S_ISREG(st.st_mode):  # a FIFO nobody writes to would wait for ever
        raise BadKeyError(f"Error: the public key {text} is not a regular file.")
    try:
        with open(text, encoding="utf-8") as fh:
            line = fh.readline(4096)
    except OSError as err:
        raise BadKeyError(f"Error: cannot read the public key {text}: {err.strerror}.") from err
    except UnicodeDecodeError as err:
        raise BadKeyError(f"Error: {text} is not a public key file.") from err
    if _PRIVATE_KEY in line:
        raise BadKeyError(_PRIVATE_GIVEN.format(what=text))
    return PublicKey.from_line(line)


# what the first line of any private key file (OpenSSH's, PEM) holds
_PRIVATE_KEY = "PRIVATE KEY-----"
_PRIVATE_GIVEN = (
    "Error: {what} is a private key; give the signer's public key instead: the .pub file beside it "
    "(`ssh-keygen -y -f KEY` prints it). The private key stays with its signer. Nothing was changed."
)


def _time(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    return int(parse_when(value, name).timestamp())


def _entry(s: Signer) -> dict[str, Any]:
    data = s.to_dict()
    data["valid_now"] = s.problem_at(int(datetime.now(tz=timezone.utc).timestamp())) is None
    return data


def _report(vault: Vault, args: argparse.Namespace, signers: Signers, said: str) -> int:
    if args.json:
        print_json({"signers": [_entry(s) for s in signers.entries], "commit": _signers_commit(vault)})
    else:
        print(said)
    return 0


def _signers_commit(vault: Vault) -> str | None:
    return read_signers(vault.repo, vault.keyring)[1]


def signer_add(vault: Vault, args: argparse.Namespace) -> int:
    public = _read_public(args.key)
    signers = vault.add_signer(
        args.name,
        public,
        actor=args.actor,
        operator=args.operator,
        valid_after=_time(args.valid_after, "--valid-after"),
        valid_before=_time(args.valid_before, "--valid-before"),
        session=args.session,
    )
    role = "an operator" if args.operator else "a signer"
    return _report(vault, args, signers, f"Added {args.name} as {role} with key {public.fingerprint}.")


def signer_rotate(vault: Vault, args: argparse.Namespace) -> int:
    public = _read_public(args.key)
    before = vault.signers.entries
    signers = vault.rotate_signer(args.name, public, actor=args.actor, session=args.session)
    n = _changed(before, signers)
    older = "its older key" if n <= 1 else f"its {n} older keys"
    said = f"{args.name} signs with {public.fingerprint} from now on; {older} stopped now."
    return _report(vault, args, signers, said)


def signer_revoke(vault: Vault, args: argparse.Namespace) -> int:
    public = _read_public(args.key) if args.key else None
    before = vault.signers.entries
    signers = vault.revoke_signer(
        args.name,
        actor=args.actor,
        key=public,
        compromised=args.compromised,
        reason=args.reason,
        session=args.session,
    )
    # Without --key every key of NAME is revoked: say how many, not "NAME's key".
    n = _changed(before, signers)
    keys = "key" if n <= 1 else f"{n} keys"
    if args.compromised:
        said = (
            f"Revoked {args.name}'s {keys} as compromised: no signature {'it' if n <= 1 else 'they'} ever made counts."
        )
    else:
        makes = "it makes" if n <= 1 else "they make"
        said = f"Revoked {args.name}'s {keys}: signatures {makes} from now on do not count."
    return _report(vault, args, signers, said)


def _changed(before: tuple[Signer, ...], after: Signers) -> int:
    """How many of the entries ``before`` a change of the signers changed
    (it changes entries in place and adds any new one at the end)."""
    return sum(1 for old, new in zip(before, after.entries, strict=False) if old != new)


def signer_list(vault: Vault, args: argparse.Namespace) -> int:
    signers = vault.signers
    if args.json:
        print_json({"signers": [_entry(s) for s in signers.entries], "commit": _signers_commit(vault)})
        return 0
    if not signers:
        print("No signers yet: an operator adds the first with `vaultmem signer add NAME KEY.pub --operator`.")
        return 0
    now = int(datetime.now(tz=timezone.utc).timestamp())
    for s in signers.entries:
        role = "operator" if s.operator else "signer"
        until = f" until {show_time(s.until)}" if s.until is not None else ""
        state = "valid" if s.problem_at(now) is None else (s.problem_at(now) or "")
        if s.compromised:
            state = "revoked (compromised)"
        elif state == "expired" and now < s.valid_after:  # its window has not begun
            state = "not yet valid"
        print(f"{s.principal}  {role}  {s.key.fingerprint}  from {show_time(s.valid_after)}{until}  {state}")
    return 0


def checkpoint(vault: Vault, args: argparse.Namespace) -> int:
    # --out is opened first: a file that cannot be written makes no checkpoint
    existed = bool(args.out) and os.path.lexists(args.out)
    out = _open_for_append(args.out) if args.out else None
    try:
        try:
            made = vault.checkpoint(actor=args.actor)
        except BaseException:
            if out is not None and not existed:  # the file this command made, still empty: removed
                with contextlib.suppress(OSError):
                    out.close()
                    os.unlink(args.out)
            raise
        if out is not None:
            size = os.fstat(out.fileno()).st_size
            try:
                _append_whole(out.fileno(), made.text.encode("utf-8"))
            except OSError as err:  # a full disk: no part of it stays to damage the checkpoints before it
                with contextlib.suppress(OSError):
                    if existed:
                        os.ftruncate(out.fileno(), size)
                    else:
                        os.unlink(args.out)
                raise VaultError(
                    f"Error: the checkpoint was kept on the vault's vaultmem-checkpoints branch, but appending it to "
                    f"{args.out} failed ({err.strerror}), so the file is as it was; "
                    "`git show vaultmem-checkpoints:checkpoints` holds it."
                ) from err
    finally:
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()
    if args.json:
        print_json(
            {"head": made.head, "commits": made.commits, "time": made.time, "signer": made.signer, "text": made.text}
        )
    elif args.out:
        said = f"{made.commits} commit{'' if made.commits == 1 else 's'}"
        print(f"Checkpoint of main at {short(made.head)} ({said}) signed and appended to {args.out}.")
    else:
        sys.stdout.write(made.text)
    return 0


def _append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to the file open (for appending) as ``fd``, synced; an OSError if any part fails."""
    while data:
        written = os.write(fd, data)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        data = data[written:]
    os.fsync(fd)


def _open_for_append(name: str) -> TextIO:
    try:
        return open(name, "a", encoding="utf-8")  # closed by the caller
    except OSError as err:
        raise VaultError(f"Error: cannot append to {name}: {err.strerror}; no checkpoint was made.") from err


HANDLERS = {
    "signer add": signer_add,
    "signer rotate": signer_rotate,
    "signer revoke": signer_revoke,
    "signer list": signer_list,
    "checkpoint": checkpoint,
}
