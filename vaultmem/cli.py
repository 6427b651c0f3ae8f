"""The ``vaultmem`` command: a thin layer over the library.

It only parses arguments, calls the library and prints.  The vault is chosen by
``--vault PATH`` or ``VAULTMEM_VAULT``; the key comes from ``VAULTMEM_KEY``,
``--key-file`` or a passphrase prompt (``--passphrase``).

Exit codes: 0 success, 1 the memory tool refused the call (its message is
printed), 2 usage or vault errors (wrong key, not a vault, ...).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Sequence

from anthropic.lib.tools import ToolError

from . import __version__
from .crypto import generate_key
from .errors import VaultError
from .store import Vault
from .tool import VaultMemoryTool


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vaultmem", description="An encrypted, audited memory for Claude agents.")
    parser.add_argument("--version", action="version", version=f"vaultmem {__version__}")
    parser.add_argument("--vault", default=os.environ.get("VAULTMEM_VAULT"), help="vault folder (or VAULTMEM_VAULT)")
    parser.add_argument("--key-file", help="file holding the key (mode 0600)")
    parser.add_argument("--passphrase", action="store_true", help="prompt for a passphrase instead of a key")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("keygen", help="print a new random key")
    commands.add_parser("init", help="create a new, empty vault")
    call = commands.add_parser("call", help="run one memory tool call, given as JSON")
    call.add_argument("input", help='the tool input, e.g. \'{"command": "view", "path": "/memories"}\'')
    call.add_argument("--actor", default="cli", help="who is making the change (recorded as the commit author)")
    call.add_argument("--session", default=None, help="session id recorded on the commit")
    return parser


def _open(args: argparse.Namespace, create: bool = False) -> Vault:
    passphrase = getpass.getpass("Vault passphrase: ") if args.passphrase else None
    how = Vault.init if create else Vault.open
    return how(args.vault, key_file=args.key_file, passphrase=passphrase)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        print(generate_key())
        return 0
    if not args.vault:
        print("vaultmem: no vault given: use --vault PATH or set VAULTMEM_VAULT.", file=sys.stderr)
        return 2
    try:
        if args.command == "init":
            _open(args, create=True)
            print(f"Created an empty vault in {args.vault}.")
            return 0
        vault = _open(args)
        try:
            params = json.loads(args.input)
        except json.JSONDecodeError as err:
            print(f"vaultmem: the tool input is not valid JSON: {err.msg}.", file=sys.stderr)
            return 2
        tool = VaultMemoryTool(vault, actor=args.actor, session=args.session)
        try:
            print(tool.call(params))
        except ToolError as err:
            print(err.content if isinstance(err.content, str) else str(err))
            return 1
        return 0
    except VaultError as err:
        print(f"vaultmem: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
