"""The ``vaultmem`` command: a thin layer over the library, for operators and auditors.

It only parses arguments, calls the library and prints: text for people by
default, ``--json`` for programs (the same data).  The vault is chosen by
``--vault PATH`` or ``VAULTMEM_VAULT``.  The key comes from ``--key-file F``, a
passphrase (``--passphrase`` prompts; ``VAULTMEM_PASSPHRASE`` for scripts) or
``VAULTMEM_KEY``; with none of them and a terminal on standard input, the
passphrase is prompted for.

Exit codes:
    0  success
    1  ``verify`` found problems, or the memory tool refused a ``call``
    2  usage or vault errors (wrong key, not a vault, not found, bad input)
  130  stopped by Ctrl-C

Errors go to standard error as one line, ``vaultmem: <message>``.  ``textconv``
is run by git (see ``git-setup``): it never prompts and never fails, printing a
blob it cannot decrypt unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import getpass
import importlib.util
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from vaultmem.anthropic.agent import DEFAULT_MODEL
from vaultmem.cli import signers as signers_cli
from vaultmem.cli.progress import ProgressBar
from vaultmem.cli.progress import is_terminal as _is_terminal  # tests replace it here
from vaultmem.cli.render import (
    GREEN,
    NO_VERSION,
    RED,
    YELLOW,
    change_data,
    colour_on,
    log_lines,
    paint,
    painted_diff,
    painted_log_line,
    print_json,
    short,
    shown_changes,
    tolerate_narrow_output,
    version_data,
    when,
    write_exact,
    write_text,
)
from vaultmem.core.policy import DURATIONS, MAX_DURATION, Policy, duration_words
from vaultmem.core.text import visible
from vaultmem.core.values import is_unicode
from vaultmem.errors import BadKeyError, CommandError, NotFoundError, VaultError, WrongKeyError
from vaultmem.ops.diff import unified, with_renames
from vaultmem.ops.erase import ErasureResult
from vaultmem.ops.memory import MemoryCommands, check_who, new_session

if TYPE_CHECKING:
    from vaultmem.vault import Vault


ENV_VAULT = "VAULTMEM_VAULT"
ENV_KEY = "VAULTMEM_KEY"
ENV_PASSPHRASE = "VAULTMEM_PASSPHRASE"
ENV_NEW_KEY = "VAULTMEM_NEW_KEY"
ENV_NEW_PASSPHRASE = "VAULTMEM_NEW_PASSPHRASE"


class UsageError(Exception):
    """The command line itself is wrong: exit 2 with one line (after
    ``usage``, the help that says what to type, when there is one)."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit
        if self.prog == "vaultmem" and message == "the following arguments are required: COMMAND":
            # `vaultmem` alone: a new user's first try, which the list of commands answers
            raise UsageError("give a command (see `vaultmem --help`).", usage=self.format_help())
        raise UsageError(_with_suggestion(self, message))


def _with_suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's complaint, said as git says it, with the closest command or
    option when one is close (``Did you mean `log`?``)."""
    see = f"(see `{parser.prog} --help`)"
    choice = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$", message, re.S)
    if choice is not None:
        option, given, names = choice.group(1), choice.group(2), re.findall(r"'([^']*)'", choice.group(3))
        close = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
        hint = f" It takes {', '.join(names)}." if len(names) <= 6 else ""
        if close:
            hint = f" Did you mean `{close[0]}`?"
        if parser.prog == "vaultmem" and given in ("help", "version"):  # `git help`, `gh version`
            hint = f" Did you mean `vaultmem --{given}`?"
        if option.startswith("-"):  # an option's value (pull --policy-from), not a command
            return f"'{given}' is not a value {option.split('/')[-1]} takes.{hint} {see}"
        return f"'{given}' is not a {parser.prog} command.{hint} {see}"
    unknown = re.match(r"unrecognized arguments: (.*)$", message, re.S)
    if unknown is not None:
        first = unknown.group(1).split()[0]
        given = first.split("=")[0]
        options = [o for o in _all_options(parser) if o != given]  # never the option just refused
        close = difflib.get_close_matches(given, options, n=1, cutoff=0.6)
        hint = f" Did you mean `{close[0]}`?" if close and first.startswith("-") else ""
        if given.startswith("--") and given in _all_options(build_parser()):  # another command's option
            hint = f" `{parser.prog}` takes no {given}."
        return f"{message}.{hint} {see}"
    return f"{message} {see}"


def _unshown_passphrase(argv: list[str], err: UsageError) -> UsageError:
    """``err``, unless it would show what was typed as ``--passphrase``'s value
    (``--passphrase WORDS`` or ``--passphrase=WORDS``): the option takes none,
    and the words are most likely the passphrase, so they are not shown."""
    for i, word in enumerate(argv):
        if word.startswith("--passphrase="):
            given = word.partition("=")[2]
        elif word == "--passphrase" and i + 1 < len(argv):
            given = argv[i + 1]
        else:
            continue
        if given and given in str(err):
            return UsageError(
                "--passphrase takes no value: it asks for the passphrase (or reads one line from a pipe). "
                f"To give it without asking, set {ENV_PASSPHRASE} or use --passphrase-file FILE. "
                "(What followed --passphrase is not shown.)"
            )
    return err


def _typed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command the arguments name (``key rotate``'s for
    ``vaultmem key rotate ...``), or ``parser`` itself when they name none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(args, action.dest or "", None) or "")
            if sub is not None:
                return _typed(sub, args)
    return parser


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of the parser and of its sub-commands."""
    found = [o for a in parser._actions for o in a.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _all_options(sub)
    return sorted(set(found))


# -- the command line ----------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from vaultmem import __version__

    parser = _Parser(
        prog="vaultmem",
        description="An encrypted, audited memory for Claude agents.",
        epilog="exit codes: 0 success; 1 verify found problems, or the memory tool refused a call; "
        "2 usage or vault errors; 130 stopped by Ctrl-C",
    )
    parser.add_argument("--version", action="version", version=f"vaultmem {__version__}")
    _global_options(parser, os.environ.get(ENV_VAULT), None, False, None)
    signers_cli.signing_options(parser, None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _keygen_parser(commands)
    _init_parser(commands)
    _call_parser(commands)
    _ls_parser(commands)
    _cat_parser(commands)
    _log_parser(commands)
    _show_parser(commands)
    _diff_parser(commands)
    _restore_parser(commands)
    _undo_parser(commands)
    _verify_parser(commands)
    _find_parser(commands)
    _forget_parser(commands)
    _redact_parser(commands)
    _migrate_parser(commands)
    _retention_parser(commands)
    key = _key_parser(commands)
    _key_list_parser(key)
    _key_change_parser(key)
    _key_rotate_parser(key)
    _import_parser(commands)
    _export_parser(commands)
    _expire_parser(commands)
    policy = _policy_parser(commands)
    _policy_show_parser(policy)
    _policy_set_parser(policy)
    _policy_log_parser(policy)
    _demo_parser(commands)
    _chat_parser(commands)
    _git_setup_parser(commands)
    _clone_parser(commands)
    remote = _remote_parser(commands)
    _remote_add_parser(remote)
    _remote_list_parser(remote)
    _remote_remove_parser(remote)
    _push_parser(commands)
    _pull_parser(commands)
    _sync_parser(commands)
    _textconv_parser(commands)
    _completion_parser(commands)
    signers_cli.add_parsers(commands)
    _mcp_parser(commands)
    for name, command, purpose in _named_leaves(parser):
        # Given after the command too (`vaultmem ls --vault X`), as git and gh
        # take them; there, an option overrides the same option given before.
        if name not in OWN_VAULT:
            _global_options(command, *[argparse.SUPPRESS] * 4)
            signers_cli.signing_options(command, argparse.SUPPRESS)
        if name == "mcp":  # MCP speaks on standard input: a passphrase is never read there (_key_args)
            command._option_string_actions["--passphrase"].help = (
                f"use a passphrase: from {ENV_PASSPHRASE}, else asked for at a terminal (never read from standard "
                "input, where MCP speaks)"
            )
        command.description = purpose[:1].upper() + purpose[1:] + "."
        command.epilog = (EPILOGS.get(name, "") + "\n\n" if name in EPILOGS else "") + f"example:\n  {EXAMPLES[name]}"
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    for name, group, purpose in _named_groups(parser):  # `vaultmem key --help`: its purpose and an example too
        first = next(leaf for leaf in EXAMPLES if leaf.startswith(name + " "))
        group.description = purpose[:1].upper() + purpose[1:] + "."
        group.epilog = f"example:\n  {EXAMPLES[first]}\n\neach command's options: vaultmem {name} COMMAND --help"
        group.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _named_groups(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line purpose) of every command that groups others (``key``, ``policy``)."""
    found: list[tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            purposes = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    found.append((name, sub, purposes.get(name, "")))
    return found


# Commands that make their own vault and key, so take no vault, key or signing options.
OWN_VAULT = ("demo",)

# One example a command, shown at the end of its --help (each parses: tested).
EXAMPLES = {
    "keygen": "vaultmem keygen",
    "init": "vaultmem init --vault agent.vault --passphrase",
    "call": """vaultmem call '{"command": "view", "path": "/memories"}'""",
    "ls": "vaultmem ls /memories/customers --at main~3",
    "cat": "vaultmem cat /memories/notes.txt --at '2026-11-04 12:00'",
    "log": "vaultmem log /memories/customers --actor support-bot --since 2026-11-04",
    "show": "vaultmem show main",
    "diff": "vaultmem diff main~3 main --path /memories/policies",
    "restore": "vaultmem restore 5ac6c9bb78 --path /memories/policies/refunds.md --actor ops-alice",
    "undo": "vaultmem undo 2 --actor ops-alice",
    "verify": "vaultmem verify --json",
    "find": "vaultmem find ada@example.com",
    "forget": "vaultmem forget --matching ada@example.com --reason 'GDPR request 4411' --dry-run",
    "migrate": "vaultmem migrate",
    "retention": "vaultmem retention --dry-run",
    "redact": "vaultmem redact 5ac6c9bb78 /memories/notes.txt --reason 'pasted a card number'",
    "key list": "vaultmem key list",
    "key change": "vaultmem key change --new-key-file new.key",
    "key rotate": "vaultmem key rotate --reencrypt",
    "import": "vaultmem import ./sdk-memory --actor ops-alice",
    "export": "vaultmem export ./plain --at main~1",
    "expire": "vaultmem expire --unread-for 90d --dry-run",
    "policy show": "vaultmem policy show --json",
    "policy set": "vaultmem policy set secrets=refuse max_files=500 expire_after=90d --actor ops-alice",
    "policy log": "vaultmem policy log",
    "demo": "vaultmem demo ./demo.vault",
    "chat": "vaultmem chat --topic 'support tickets' --session ticket-4411",
    "git-setup": "vaultmem git-setup --key-file vault.key",
    "textconv": "vaultmem textconv blob.txt",
    "completion": "vaultmem completion bash",
    "clone": "vaultmem clone ssh://git@git.example.com/support.vault ./support.vault --key-file vault.key",
    "remote add": "vaultmem remote add origin ssh://git@git.example.com/support.vault",
    "remote list": "vaultmem remote list --json",
    "remote remove": "vaultmem remote remove origin",
    "push": "vaultmem push origin",
    "pull": "vaultmem pull origin",
    "sync": "vaultmem sync",
    **signers_cli.EXAMPLES,
    "mcp": "vaultmem mcp --vault support.vault --actor claude-code",
}

EPILOGS_COMPLETION = (
    "install it with one command:\n"
    "  bash: vaultmem completion bash >> ~/.bashrc\n"
    "  zsh:  vaultmem completion zsh >> ~/.zshrc\n"
    "  fish: mkdir -p ~/.config/fish/completions && vaultmem completion fish > ~/.config/fish/completions/vaultmem.fish"
)

EPILOGS = {
    "completion": EPILOGS_COMPLETION,
    "policy set": "fields:\n"
    "  secrets=off|redact|refuse   what a write holding a secret or personal data gets\n"
    "  personal_data=true|false    also look for personal data (e-mail addresses, phone numbers)\n"
    '  patterns=JSON               more detectors: {"kind": "regular expression"}\n'
    "  max_file_bytes=N            the largest file, in bytes of UTF-8 (default 102400)\n"
    "  max_vault_bytes=N|null      the most bytes the memory may hold\n"
    "  max_files=N|null            the most files the memory may hold\n"
    "  expire_after=DURATION|null  `vaultmem expire` deletes files unread this long, such as 90d\n"
    "  sync_remote=NAME|null       memory tools keep the vault in step with this remote (automatic sync)\n"
    "  sync_every=DURATION|null    and also pull and push this often, such as 60s\n"
    "  content_retention=DURATION|null  versions written longer ago are erased (current files stay), "
    "such as 365d\n"
    "  require_signatures=true|false  refuse every write not signed by a valid signer (docs/signing.md)\n"
    "  checkpoint_every=N|null     sign a checkpoint of main every N commits made with a signing key",
}


def _named_leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line purpose) of every command, sub-commands (``key list``) included."""
    found: list[tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            purposes = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    found += _named_leaves(sub, f"{prefix}{name} ")
                else:
                    found.append((f"{prefix}{name}", sub, purposes.get(name, "")))
    return found


def _global_options(
    parser: argparse.ArgumentParser, vault: object, key_file: object, passphrase: object, passphrase_file: object
) -> None:
    """The options every command takes, before or after its name."""
    taken = set(parser._option_string_actions)
    if "--vault" not in taken:
        parser.add_argument("--vault", metavar="PATH", default=vault, help=f"vault folder (or {ENV_VAULT})")
    if "--key-file" not in taken:  # git-setup's own --key-file names the key git should use
        parser.add_argument(
            "--key-file", metavar="FILE", default=key_file, help="file holding the key (mode 0600); - reads a pipe"
        )
    if "--passphrase" not in taken:
        parser.add_argument(
            "--passphrase",
            action="store_true",
            default=passphrase,
            help=f"use a passphrase: from {ENV_PASSPHRASE}, else prompted for, or one line of a pipe",
        )
    if "--passphrase-file" not in taken:
        parser.add_argument(
            "--passphrase-file",
            metavar="FILE",
            default=passphrase_file,
            help="file whose first line is the passphrase (mode 0600)",
        )


_Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"  # the sub-commands of a parser


def _keygen_parser(commands: _Commands) -> None:
    _json(commands.add_parser("keygen", help="print a new random key"))


def _init_parser(commands: _Commands) -> None:
    init = commands.add_parser("init", help="create a new, empty vault")
    init.add_argument(
        "--sealed-names",
        action="store_true",
        help="store every file and folder name as an opaque token, the real name encrypted with each version",
    )
    _json(init)


def _key_parser(commands: _Commands) -> _Commands:
    key = commands.add_parser("key", help="list, change or rotate keys").add_subparsers(
        dest="key_command", required=True, metavar="KEY_COMMAND"
    )
    return key


def _policy_parser(commands: _Commands) -> _Commands:
    policy = commands.add_parser("policy", help="show, change or list changes of the vault's policy").add_subparsers(
        dest="policy_command", required=True, metavar="POLICY_COMMAND"
    )
    return policy


def _demo_parser(commands: _Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="an offline agent session on a temporary vault (or a new one in FOLDER), Claude's turns replayed",
    )
    demo.add_argument("folder", metavar="FOLDER", nargs="?", help="keep the demo vault here (key in FOLDER.key)")
    demo.add_argument(
        "--example",
        metavar="DIR",
        help="instead, build docs/audit.md's example: DIR/support.vault, its key in DIR/support.vault.key",
    )


def _example(args: argparse.Namespace) -> int:
    from vaultmem.cli import example
    from vaultmem.core.crypto import generate_key

    if args.folder:
        raise UsageError("give either FOLDER (the demo) or --example DIR, not both.")
    if not args.example:
        raise UsageError("--example needs a folder DIR (the example goes in DIR/support.vault); it was empty.")
    vault_path, key_path = example.build_in(args.example, generate_key())
    print(f"Built the example vault of docs/audit.md in {vault_path}, its key in {key_path} (mode 0600).")
    print("Use it from that folder with:")
    print(f"  export VAULTMEM_VAULT={shlex.quote(vault_path.name)}")
    print(f"  export VAULTMEM_KEY=$(cat {shlex.quote(key_path.name)})")
    return 0


def _at(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--at", metavar="AT", help="as at a version id, a git revision such as main~2, or a time")


def _json(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", action="store_true", help="print JSON for programs")


def _who(sub: argparse.ArgumentParser, default: str) -> None:
    sub.add_argument(
        "--actor", metavar="NAME", default=default, help=f"recorded as the version's author (default {default})"
    )
    sub.add_argument("--session", metavar="ID", help="session id recorded on the version")


# -- main ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    _reopen_closed_streams()
    tolerate_narrow_output()
    command: str | None = None
    try:
        parser = build_parser()
        if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (`vaultmem completion`)
            import argcomplete

            argcomplete.autocomplete(parser)
        try:
            args, extras = parser.parse_known_args(argv)
            command = args.command
            if extras:  # refused by the command typed, with its own options to suggest from
                _typed(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
        except UsageError as err:
            raise _unshown_passphrase(sys.argv[1:] if argv is None else list(argv), err) from None
        _check_text_arguments(args)
        _check_key_files(args)
        if args.command in ("demo", "import", "export") and args.folder == "":  # `export "$OUT"`, OUT unset
            raise UsageError(f"{args.command} was given an empty FOLDER; give the folder's path.")
        code = _run(args)
        try:
            sys.stdout.flush()  # here, not at exit, so a closed pipe or a full disk is reported as below
        except BrokenPipeError:  # the reader stopped early: the command's own code stands (verify's 1)
            _silence_stdout()
        return code
    except UsageError as err:
        return _fail(str(err), usage=err.usage)
    except VaultError as err:
        return _fail(_in_cli_words(err, command))
    except OSError as err:
        if isinstance(err, BrokenPipeError):  # `vaultmem log | head`: the reader has what it wanted
            _silence_stdout()
            return 0
        if _from_output(err):
            _silence_stdout()  # what could not be written is dropped, not retried at exit
            return _fail(f"cannot write to standard output: {err.strerror or err}.")
        return _fail(f"{err.strerror or err}: {err.filename}" if err.filename else str(err.strerror or err))
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug or a damaged repository: still one line, never a traceback
        return _fail(f"unexpected {type(err).__name__}: {err}; run `vaultmem verify`, and report it if it persists.")


# The code registers itself with `compdef`, which only zsh's completion system
# defines; zsh's own default ~/.zshrc does not start it, so appended there the
# code would fail with `command not found: compdef` in every new shell.
_ZSH_COMPINIT = """\
if [[ -n "${ZSH_VERSION-}" ]] && ! (( ${+functions[compdef]} )); then
    autoload -Uz compinit && compinit
fi
"""


def _run(args: argparse.Namespace) -> int:
    if args.command == "keygen":
        from vaultmem.core.crypto import generate_key

        key = generate_key()
        if args.json:
            print_json({"key": key})
        else:
            print(key)
        return 0
    if args.command == "textconv":
        return _textconv(args)
    if args.command == "completion":
        import argcomplete.shell_integration

        code = argcomplete.shell_integration.shellcode(["vaultmem"], shell=args.shell)
        if args.shell == "zsh":  # after its `#compdef` line, which zsh reads when the file is in $fpath
            first, _, rest = code.partition("\n")
            code = f"{first}\n{_ZSH_COMPINIT}{rest}"
        sys.stdout.write(code)
        return 0
    if args.command == "demo" and args.example is not None:
        return _example(args)
    if args.command == "demo":
        from vaultmem.cli import demo

        demo.run(args.folder, sys.stdout)
        return 0
    if args.command == "chat":
        from vaultmem.cli import chat

        if not chat.has_api_key():
            print(chat.NO_KEY, file=sys.stderr)
            return 2
        if args.max_tokens < 1:
            raise UsageError("--max-tokens must be at least 1.")
    if args.command == "clone":
        return _clone(args)
    if args.command == "signer" and args.signer_command == "new":
        return signers_cli.signer_new(args)
    if not args.vault:
        if args.vault == "" and os.environ.get(ENV_VAULT) != "":  # `--vault "$VAULT"`, the variable unset
            raise UsageError("--vault was given an empty path; give the vault's folder.")
        raise UsageError(f"no vault given: use --vault PATH or set {ENV_VAULT}.")
    if args.command == "init":
        from vaultmem.vault import Vault

        source = _key_args(args, create=True)
        Vault.init(args.vault, sealed_names=args.sealed_names, **source).close()
        if args.json:
            print_json(
                {
                    "vault": str(Path(args.vault).resolve()),
                    "protection": _protection(source),
                    "sealed_names": args.sealed_names,
                }
            )
        else:
            print(f"Created an empty vault in {args.vault}" + (", with sealed names." if args.sealed_names else "."))
        return 0
    with _open(args) as vault:
        signers_cli.use_signing_key(vault, args)
        name = {
            "key": f"key {getattr(args, 'key_command', '')}",
            "policy": f"policy {getattr(args, 'policy_command', '')}",
            "remote": f"remote {getattr(args, 'remote_command', '')}",
            "signer": f"signer {getattr(args, 'signer_command', '')}",
        }
        handler = COMMANDS[name.get(args.command, args.command)]
        return handler(vault, args)


# Arguments that name something in the vault (a version, a time, a text to
# find, a remote) or go into its records: bytes that are not UTF-8 there can
# match nothing and be stored nowhere, so they are refused before any work.
_TEXT_ARGUMENTS = {
    "at": "the version",
    "version": "the version",
    "a": "the version",
    "b": "the version",
    "since": "--since",
    "until": "--until",
    "valid_after": "--valid-after",
    "valid_before": "--valid-before",
    "actor": "the actor",
    "session": "the session",
    "pattern": "the text to find",
    "matching": "--matching",
    "within": "--path",
    "keep_for": "--keep-for",
    "unread_for": "--unread-for",
    "changes": "FIELD=VALUE",
    "url": "the URL",
    "remote": "the remote",
    "model": "--model",
    "topic": "--topic",
}


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse, naming it, an argument of :data:`_TEXT_ARGUMENTS` holding bytes
    that are not UTF-8 (``call`` leaves its actor and session to the tool,
    which refuses them as it refuses any bad one)."""
    for dest, label in _TEXT_ARGUMENTS.items():
        if (dest in ("actor", "session") and args.command == "call") or (dest == "url" and args.command != "remote"):
            continue
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not is_unicode(item):
                raise _not_unicode(f"{label} {item!r}")


_KEY_FILES = {
    "key_file": "--key-file",
    "passphrase_file": "--passphrase-file",
    "signing_key": "--signing-key",
    "signing_passphrase_file": "--signing-passphrase-file",
    "textconv_key_file": "--key-file",  # git-setup's own
}


def _check_key_files(args: argparse.Namespace) -> None:
    """Refuse a key option given an empty path (``--key-file "$KEY_FILE"``
    with the variable unset): it would otherwise count as not given, and
    another key (``VAULTMEM_KEY``), or none, would be used in its place."""
    for dest, option in _KEY_FILES.items():
        if getattr(args, dest, None) == "":
            raise UsageError(f"{option} was given an empty path; give the file's path.")


def _fail(message: str, usage: str = "") -> int:
    """One line on standard error, ``vaultmem: `` and the message (without the
    ``Error:`` the memory tool's own messages start with), after ``usage``."""
    text = visible(" ".join(message.split())).removeprefix("Error: ")
    if text[:2].istitle():  # "Nothing was written" reads "vaultmem: nothing was written", as git says it
        text = text[0].lower() + text[1:]
    try:
        sys.stderr.write(usage + "vaultmem: " + text + "\n")
        sys.stderr.flush()
    except OSError:  # standard error is a closed pipe (`2>&1 | head -0`): the exit code still says it
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stderr.fileno())
            os.close(devnull)
    return 2


# Each next step the library names (vaultmem.errors.STEPS), said with this
# command's own commands, flags and variables.
CLI_STEPS = {
    "create": "Create one with `vaultmem init`.",
    "versions": "List the versions with `vaultmem log`.",
    "use-key": f"Set {ENV_KEY} or use --key-file FILE.",
    "give-key": f"Set {ENV_KEY} or {ENV_PASSPHRASE}, or use --key-file FILE, --passphrase or --passphrase-file FILE.",
    "is-passphrase": f"If it is a passphrase, use --passphrase-file FILE, --passphrase or {ENV_PASSPHRASE}.",
    "give-passphrase": f"Use --passphrase-file FILE or --passphrase, or set {ENV_PASSPHRASE} instead of {ENV_KEY}.",
    "new-key": f"Pull with the new key: --new-key-file FILE, or {ENV_NEW_KEY} or {ENV_NEW_PASSPHRASE}.",
    "choose-policy": "Pull again with --policy-from ours or --policy-from theirs to say which side's values win.",
    "import-replace": "Import into an empty vault, remove them first, or give --replace to make the memory exactly "
    "the folder. Nothing was imported.",
}


# vaultmem mcp speaks MCP on standard input: it never reads a passphrase there.
MCP_STEPS = {
    **CLI_STEPS,
    "give-key": f"Set {ENV_KEY} or {ENV_PASSPHRASE}, or use --key-file FILE or --passphrase-file FILE.",
    "is-passphrase": f"If it is a passphrase, use --passphrase-file FILE or {ENV_PASSPHRASE}.",
    "give-passphrase": f"Use --passphrase-file FILE, or set {ENV_PASSPHRASE} instead of {ENV_KEY}.",
}


def _in_cli_words(err: VaultError, command: str | None = None) -> str:
    step = (MCP_STEPS if command == "mcp" else CLI_STEPS).get(err.step or "")
    return f"{err.fact} {step}" if step else str(err)


def _silence_stdout() -> None:
    """Send what standard output still holds, and will be given, to /dev/null."""
    with contextlib.suppress(AttributeError, ValueError, OSError):  # not a file (a test's capture): nothing to do
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


def _from_output(err: OSError) -> bool:
    """Whether ``err`` came from writing the command's output (a full disk or a
    dead terminal behind standard output), not from the vault: raised where
    the CLI itself prints, with no file named."""
    if err.filename is not None or err.__traceback__ is None:
        return False
    frame = err.__traceback__
    while frame.tb_next is not None:
        frame = frame.tb_next
    return frame.tb_frame.f_globals.get("__name__") in _PRINTING_MODULES


_PRINTING_MODULES = ("vaultmem.cli.app", "vaultmem.cli.render", "vaultmem.cli.signers")


_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def _reopen_closed_streams() -> None:
    """Standard input, output or error started closed (``vaultmem log >&-``):
    put ``/dev/null`` in its place, as git does, before the vault opens a
    file that would otherwise take its number, and where a passphrase read,
    a message or a child process writing there would then land."""
    for fd, name, mode in _STREAMS:
        if getattr(sys, name) is not None:
            continue
        # The lowest free number: ``fd`` itself, unless something took it meanwhile.
        null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
        if null == fd:
            os.set_inheritable(fd, True)  # git and ssh, run by the command, find it there too
        setattr(sys, name, os.fdopen(null, mode, encoding="utf-8"))  # kept open for the whole command


# -- keys ------------------------------------------------------------------------


class KeyArgs(TypedDict, total=False):
    """The one key source handed to ``Vault.open`` / ``Vault.init`` (none: ``VAULTMEM_KEY``)."""

    key: str
    key_file: str
    passphrase: str


def _open(args: argparse.Namespace) -> Vault:
    from vaultmem.vault import Vault

    fallback = args.textconv_key_file if args.command == "git-setup" else None
    given = _key_args(args, create=False, fallback_key_file=fallback)
    try:
        return Vault.open(args.vault, **given)
    except WrongKeyError:
        found = _new_key(args) if args.command == "pull" else None
        if found is not None:  # a pull after a key change elsewhere, cut short once the new keyring was in place
            try:
                return Vault.open(args.vault, **found[0])
            except WrongKeyError:
                pass  # neither key opens it: the error is about the key given
        # An older vaultmem kept a passphrase file's BOM as part of the
        # passphrase: the same file still opens a vault made that way.
        if not (args.passphrase_file and _starts_with_bom(args.passphrase_file)):
            raise
        return Vault.open(args.vault, passphrase="\ufeff" + given["passphrase"])


def _starts_with_bom(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(3) == b"\xef\xbb\xbf"
    except OSError:
        return False


def _key_args(
    args: argparse.Namespace, create: bool, fallback_key_file: str | None = None, folder: str | None = None
) -> KeyArgs:
    """Which key opens the vault in ``folder`` (default ``--vault``): --key-file,
    --passphrase-file, --passphrase (VAULTMEM_PASSPHRASE, a prompt, or a
    pipe's first line), VAULTMEM_KEY, VAULTMEM_PASSPHRASE, else a passphrase
    prompt if there is a terminal and a passphrase opens the vault."""
    folder = folder or args.vault
    given = [
        name
        for name, value in (
            ("--key-file", args.key_file),
            ("--passphrase", args.passphrase),
            ("--passphrase-file", args.passphrase_file),
        )
        if value
    ]
    if len(given) > 1:
        raise UsageError(f"give only one of {' and '.join(given)}.")
    if args.key_file == "-":  # `pass show agent-vault | vaultmem --key-file - ls`: the pipe's first line
        if args.command == "mcp":
            raise UsageError("vaultmem mcp reads no key from standard input (MCP speaks there): use a key file.")
        return {"key": _piped_key()}
    if args.key_file:
        return {"key_file": args.key_file}
    if args.passphrase_file:
        from vaultmem.core.crypto import read_passphrase_file

        return {"passphrase": read_passphrase_file(args.passphrase_file, ENV_PASSPHRASE)}
    if args.passphrase:
        if args.command == "mcp" and not os.environ.get(ENV_PASSPHRASE) and not _is_terminal(sys.stdin):
            raise UsageError(
                "vaultmem mcp reads no passphrase from standard input (MCP speaks there): "
                f"set {ENV_PASSPHRASE} or use --passphrase-file FILE."
            )
        if os.environ.get(ENV_PASSPHRASE):
            return {"passphrase": _unicode(os.environ[ENV_PASSPHRASE], ENV_PASSPHRASE)}
        _refuse_before_asking(args, folder, create)
        return {"passphrase": _ask_passphrase(folder, create)}
    if os.environ.get(ENV_KEY):
        return {}  # the library reads it, and names it in its errors
    if fallback_key_file:
        return {"key_file": fallback_key_file}
    if os.environ.get(ENV_PASSPHRASE):
        return {"passphrase": _unicode(os.environ[ENV_PASSPHRASE], ENV_PASSPHRASE)}
    if not create and args.command != "clone":  # a clone's vault is not there yet to be asked
        from vaultmem.vault import Vault

        protection = Vault.protection(folder)
        if protection == "key":  # no passphrase opens it: asking for one would mislead
            raise UsageError(f"no key given: {folder} is protected by a key; set {ENV_KEY} or use --key-file FILE.")
        if protection == "passphrase" and args.command == "mcp":  # MCP speaks on standard input
            raise UsageError(
                f"no passphrase given: {folder} is protected by a passphrase, which vaultmem mcp does not ask "
                f"for; set {ENV_PASSPHRASE} or use --passphrase-file FILE."
            )
        if protection == "passphrase" and not _is_terminal(sys.stdin):
            raise UsageError(
                f"no passphrase given: {folder} is protected by a passphrase, and standard input is not a "
                f"terminal to ask for it; set {ENV_PASSPHRASE}, use --passphrase-file FILE, or pipe it in with "
                "--passphrase."
            )
    if _is_terminal(sys.stdin) and args.command != "mcp":
        _refuse_before_asking(args, folder, create)
        return {"passphrase": _ask_passphrase(folder, create)}
    if args.command == "mcp":  # MCP speaks on standard input
        raise UsageError(
            f"no key given: set {ENV_KEY} or {ENV_PASSPHRASE}, or use --key-file FILE or --passphrase-file FILE."
        )
    raise UsageError(
        f"no key given: set {ENV_KEY} or {ENV_PASSPHRASE}, or use --key-file FILE, --passphrase-file FILE "
        "or --passphrase."
    )


def _piped_key() -> str:
    """The key on standard input's first line (``--key-file -``), never from a terminal."""
    if _is_terminal(sys.stdin):
        raise UsageError("--key-file - reads the key from a pipe, and standard input is a terminal.")
    line = _piped("the key on standard input", sys.stdin.readline).removeprefix("\ufeff").strip()
    if not line:
        raise UsageError("--key-file - reads the key from standard input's first line, and it was empty.")
    return line


def _refuse_before_asking(args: argparse.Namespace, folder: str, create: bool) -> None:
    """At a terminal, what the vault would refuse once the passphrase is typed
    (a mistyped ``--vault``: no such folder, not a vault; ``init`` in a folder
    that is not empty) is refused before asking for it."""
    from vaultmem.errors import NotAVaultError, StorageError
    from vaultmem.vault import Vault

    if not _is_terminal(sys.stdin) or args.command == "clone":  # a clone's folder is made by the clone
        return
    if create:
        from vaultmem.repo.engine import taken_folder

        path = Path(folder)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise UsageError(taken_folder(path))
        return
    if Vault.protection(folder) is None:  # not a vault, or one whose keyring opening it explains
        try:
            Vault.open(folder).close()
        except (NotAVaultError, StorageError):  # not a vault, or one this user may not read
            raise
        except VaultError:
            pass  # a vault: the passphrase is asked for, and opening says what is wrong


def _unicode(value: str, where: str) -> str:
    """``value``, if it is Unicode text: bytes that are not UTF-8 (in the
    environment, on a pipe) are refused here, naming where they came from."""
    if not is_unicode(value):
        raise _not_unicode(where)
    return value


def _piped(where: str, read: Callable[[], str]) -> str:
    """What ``read`` takes from standard input (its first line, or all of
    it), refused unless it is Unicode text, naming ``where`` it came from."""
    try:
        return _unicode(read(), where)
    except UnicodeDecodeError:  # standard input decoded strictly (not in UTF-8 mode)
        raise _not_unicode(where) from None


def _not_unicode(where: str) -> UsageError:
    return UsageError(f"{where} is not valid Unicode text (it holds bytes that are not UTF-8).")


def _protection(source: KeyArgs) -> str:
    """What protects a vault opened or made with ``source``: a key or a passphrase."""
    return "passphrase" if "passphrase" in source else "key"


def _ask_passphrase(vault: str, twice: bool) -> str:
    """A passphrase typed at a terminal (twice for a new one), or else the
    first line of standard input (a pipe: ``pass show x | vaultmem ...``)."""
    if not _is_terminal(sys.stdin):
        line = _piped("the passphrase on standard input", sys.stdin.readline).removesuffix("\n").removesuffix("\r")
        if not line:
            raise UsageError("no passphrase on standard input: its first line is read as the passphrase.")
        return line
    try:
        first = _unicode(
            getpass.getpass(f"{'New passphrase' if twice else 'Passphrase'} for {vault}: "), "the passphrase typed"
        )
        if twice:
            from vaultmem.core.crypto import check_new_passphrase

            check_new_passphrase(first)  # before asking again
            if getpass.getpass("Repeat the passphrase: ") != first:
                raise UsageError("the two passphrases differ; nothing was changed.")
    except (EOFError, KeyboardInterrupt) as err:
        if _is_terminal(sys.stderr):
            sys.stderr.write("\n")  # the message, or the shell's prompt, on a line of its own
        if isinstance(err, KeyboardInterrupt):
            raise
        raise UsageError("no passphrase given.") from err
    return first


# -- reading ---------------------------------------------------------------------


def _ls_parser(commands: _Commands) -> None:
    ls = commands.add_parser("ls", help="list the memory's files and folders with their sizes")
    ls.add_argument("path", nargs="?", default="/memories", help="folder or file (default /memories)")
    _at(ls)
    _json(ls)


def _ls(vault: Vault, args: argparse.Namespace) -> int:
    from vaultmem.core.text import format_size

    entries = vault.listing(args.path, at=args.at)
    if args.json:
        print_json([{"path": e.path, "kind": e.kind, "size": e.size} for e in entries])
        return 0
    for entry in entries:
        print(f"{format_size(entry.size):>7}  {visible(entry.path)}{'/' if entry.kind == 'dir' else ''}")
    return 0


def _cat_parser(commands: _Commands) -> None:
    cat = commands.add_parser("cat", help="print a memory file")
    cat.add_argument("path", help="the memory file, such as /memories/notes.txt")
    _at(cat)
    _json(cat)


def _cat(vault: Vault, args: argparse.Namespace) -> int:
    if args.json:  # the version first, then its text: a write landing meanwhile changes neither
        head = vault.head() if args.at is None else None
        version = vault.resolve(args.at).id if args.at is not None else str(head) if head is not None else None
        text = _read_file(vault, args.path, version)  # an empty vault: not found
        print_json({"path": args.path, "version": version, "content": text})
    else:
        write_exact(_read_file(vault, args.path, args.at))
    return 0


def _read_file(vault: Vault, path: str, at: str | None) -> str:
    """A file's text; a folder given instead is named as one, with how to list it."""
    try:
        return vault.read(path, at=at)
    except NotFoundError:
        try:
            entries = vault.listing(path, at=at)
        except VaultError:
            entries = None
        if entries is not None and not any(e.kind == "file" and e.path == path for e in entries):
            shown = visible(path)
            listing = f"vaultmem ls {shlex.quote(shown)}"
            raise UsageError(f"{shown} is a folder, not a file; list it with `{listing}`.") from None
        raise


def _log_parser(commands: _Commands) -> None:
    log = commands.add_parser("log", help="list versions, newest first")
    log.add_argument("path", nargs="?", help="only versions that changed this file or folder")
    log.add_argument("--limit", metavar="N", help="at most N versions")
    log.add_argument(
        "--since",
        metavar="TIME",
        help="versions at or after TIME (ISO 8601, UTC unless a zone is given; or '2 days ago')",
    )
    log.add_argument("--until", metavar="TIME", help="versions at or before TIME")
    log.add_argument("--actor", metavar="NAME", help="only versions by this actor")
    log.add_argument("--session", metavar="ID", help="only versions of this session")
    log.add_argument("--command", dest="memory_command", metavar="COMMAND", help="only this memory command")
    _json(log)


def _log(vault: Vault, args: argparse.Namespace) -> int:
    from vaultmem.core.versions import COMMANDS

    if args.memory_command is not None and args.memory_command not in COMMANDS:
        # No version vaultmem writes has it: an empty list would read as "never happened".
        close = difflib.get_close_matches(args.memory_command, COMMANDS, n=1, cutoff=0.6)
        hint = f"Did you mean `{close[0]}`?" if close else f"It takes {', '.join(COMMANDS)}."
        raise UsageError(f"{args.memory_command!r} is not a memory command. {hint}")
    versions = vault.history(
        args.path,
        limit=_at_least_one(args.limit, "--limit", "versions", "; leave it out to list them all"),
        since=args.since,
        until=args.until,
        actor=args.actor,
        session=args.session,
        command=args.memory_command,
    )
    if not versions and args.path is not None and _never_held(vault, args.path):
        raise _never_there(args.path)
    if args.json:
        print_json([version_data(v) for v in versions])
    else:
        on = colour_on(sys.stdout)
        for line in log_lines(versions):
            print(painted_log_line(line, on))
    return 0


def _never_held(vault: Vault, path: str) -> bool:
    """Whether ``path`` is not in the memory and no version ever changed it (a mistyped path)."""
    return not _holds(vault, path, None) and not vault.history(path, limit=1)


def _never_there(path: str) -> NotFoundError:
    """What ``log`` and ``diff`` say of a path no version held: not the empty
    answer of one that is there and did not change."""
    return NotFoundError(f"Error: the vault has no versions of {path}: no file or folder there was ever written.")


def _at_least_one(value: str | None, option: str, unit: str, hint: str = "") -> int | None:
    """The whole number an option was given (None: not given), or a refusal
    naming the option and what it takes."""
    if value is None:
        return None
    if re.fullmatch(r"[0-9]+", value) and int(value) >= 1:
        return int(value)
    raise UsageError(f"{option} takes a whole number of {unit}, at least 1 (got {value!r}){hint}.")


def _show_parser(commands: _Commands) -> None:
    show = commands.add_parser("show", help="one version: who, when, what, and its decrypted diff")
    show.add_argument("version", help="a version id (or a prefix), a revision such as main~2, or a time")
    _json(show)


def _show(vault: Vault, args: argparse.Namespace) -> int:
    version = vault.resolve(args.version)
    try:
        parent: str | None = vault.resolve(version.id + "^").id
    except NotFoundError:
        parent = None  # the first version: everything in it was added
    changes = vault.changes(parent, version.id)
    if version.command == "rename" and len(version.paths) == 2:
        changes = with_renames(changes, version.paths[0], version.paths[1])
    signature = vault.signature_of(version.id)
    if args.json:
        data = {**version_data(version), "parent": parent, "signature": signature}
        print_json({**data, "changes": [change_data(c) for c in changes]})
        return 0
    fields = [
        ("version", version.id),
        ("time", when(version.time)),
        ("actor", version.actor),
        ("session", version.session or "-"),
        ("command", version.command),
        ("path", " -> ".join(version.paths) if version.command == "rename" else ", ".join(version.paths)),
    ]
    if version.restored_from:
        source = "the empty memory" if version.restored_from == NO_VERSION else version.restored_from
        fields.append(("restored from", source))
    if version.merged:
        fields.append(("merged", version.merged))
        fields += [("conflict", conflict) for conflict in version.conflicts]
    if version.reason is not None:
        fields.append(("reason", version.reason))
    fields += [("erased", item) for item in version.erased]
    if signature is not None:
        verdict = "good" if signature["ok"] else str(signature["problem"])
        key = f"key {signature['key']}" if signature["key"] else "a signature naming no readable key"
        fields.append(("signed by", f"{signature['signer'] or '?'}, {key} ({verdict})"))
    elif vault.has_signers():
        fields.append(("signed by", "nobody (unsigned)"))
    on = colour_on(sys.stdout)
    for label, value in fields:
        print(f"{label:<14} {paint(value, YELLOW, on) if label == 'version' else visible(value)}")
    diff = unified(shown_changes(changes))
    if diff:
        print()
        write_text(painted_diff(diff, on))
    return 0


def _diff_parser(commands: _Commands) -> None:
    diff = commands.add_parser("diff", help="decrypted diff between two versions (B defaults to the latest)")
    diff.add_argument("a", metavar="A", help="the older version: an id, a revision such as main~2, or a time")
    diff.add_argument("b", metavar="B", nargs="?", help="the newer version (default: the latest)")
    diff.add_argument("--path", metavar="P", help="only this file or folder")
    _json(diff)


def _diff(vault: Vault, args: argparse.Namespace) -> int:
    if args.json:
        a = vault.resolve(args.a).id
        b = vault.resolve(args.b if args.b is not None else "main").id
        changes = vault.changes(a, b, path=args.path)
        if not changes and args.path is not None and _never_held(vault, args.path):
            raise _never_there(args.path)
        print_json({"from": a, "to": b, "changes": [change_data(c) for c in changes]})
    else:
        found = vault.changes(args.a, args.b, path=args.path)
        if not found and args.path is not None and _never_held(vault, args.path):
            raise _never_there(args.path)
        write_text(painted_diff(unified(shown_changes(found)), colour_on(sys.stdout)))
    return 0


# -- changing ----------------------------------------------------------------------


def _call_parser(commands: _Commands) -> None:
    call = commands.add_parser("call", help="run one memory tool call, given as JSON")
    call.add_argument(
        "input",
        metavar="JSON",
        help='the tool input, e.g. \'{"command": "view", "path": "/memories"}\', or - to read it from standard input',
    )
    _who(call, "cli")
    _json(call)


def _tool_input(given: str) -> str:
    """The JSON given, or with ``-`` all of standard input (after the
    passphrase's line, when ``--passphrase`` reads it there): a file near the
    size limit, escaped as JSON, can be longer than one argument may be."""
    if given != "-":
        return given
    text = _piped("the tool input on standard input", sys.stdin.read).removeprefix("\ufeff")  # as Notepad saves
    if not text.strip():
        raise UsageError("call - reads the tool input from standard input, and it was empty.")
    return text


def _call(vault: Vault, args: argparse.Namespace) -> int:
    """The memory commands themselves (no SDK to load), as the tool runs them."""
    try:
        params = json.loads(_tool_input(args.input))
    except json.JSONDecodeError as err:
        raise UsageError(f"the tool input is not valid JSON: {err.msg}.") from err
    except ValueError:  # an integer of more digits than Python turns into a number (4,300)
        raise UsageError(
            "the tool input holds a number too long to read; send line numbers as plain integers."
        ) from None
    except RecursionError:
        raise UsageError("the tool input is nested too deeply to read as JSON.") from None
    commands = MemoryCommands(vault, actor=args.actor, session=args.session or new_session())
    before = vault.head()
    try:
        check_who(args.actor, args.session)  # as VaultMemoryTool refuses it when made, reads included
    except VaultError as err:
        result, ok = str(err), False
    else:
        try:
            result, ok = commands.run(params), True
        except CommandError as err:
            result, ok = str(err), False
    if args.json:
        after = vault.head()
        made = str(after) if after is not None and after != before else None
        print_json({"ok": ok, "result": result, "version": made})
    else:
        print(result)
    return 0 if ok else 1


def _restore_parser(commands: _Commands) -> None:
    restore = commands.add_parser("restore", help="make the memory (or one path) as it was at AT, as a new version")
    restore.add_argument("at", metavar="AT", help="a version id, a git revision such as main~2, or a time")
    restore.add_argument("--path", metavar="P", help="restore only this file or folder")
    _who(restore, "cli")
    _json(restore)


def _restore(vault: Vault, args: argparse.Namespace) -> int:
    source = vault.resolve(args.at)
    what = args.path or "the memory"
    new = vault.restore(source.id, args.path, actor=args.actor, session=args.session)
    if new is None and args.path is not None and not any(_holds(vault, args.path, at) for at in (source.id, None)):
        raise NotFoundError(  # a mistyped path: not "already as it was"
            f"Error: no file or folder {args.path}, now or at {short(source.id)}; nothing was restored."
        )
    if args.json:
        print_json({"from": source.id, "path": args.path, "version": new.id if new else None})
    elif new is None:
        print(f"Nothing to restore: {what} is already as it was at {short(source.id)}.")
    elif args.path is not None and not _holds(vault, args.path, source.id):  # restored to its absence
        print(
            f"Removed {what}: it did not exist at {short(source.id)} (restored to its absence); "
            f"new version {short(new.id)}."
        )
    else:
        print(f"Restored {what} as it was at {short(source.id)}: new version {short(new.id)}.")
    return 0


def _holds(vault: Vault, path: str, at: str | None) -> bool:
    """Whether the memory held a file or folder at ``path`` at ``at`` (None: now)."""
    try:
        vault.listing(path, at=at, depth=1)
    except NotFoundError:
        return False
    return True


def _undo_parser(commands: _Commands) -> None:
    undo = commands.add_parser("undo", help="make the memory as it was N versions ago, as a new version")
    undo.add_argument("n", metavar="N", nargs="?", default="1", help="how many versions back (default 1)")
    _who(undo, "cli")
    _json(undo)


def _undo(vault: Vault, args: argparse.Namespace) -> int:
    n = _at_least_one(args.n, "undo", "versions") or 1
    new = vault.undo(n, actor=args.actor, session=args.session)
    last = "the last version" if n == 1 else f"the last {n} versions"
    if args.json:
        restored = new.restored_from if new and new.restored_from != NO_VERSION else None
        print_json({"undone": n, "version": new.id if new else None, "as_at": restored})
    elif new is None:
        print(f"Nothing to undo: undoing {last} would not change the memory.")
    elif new.restored_from and new.restored_from != NO_VERSION:
        print(f"Undid {last}: the memory is as it was at {short(new.restored_from)}, new version {short(new.id)}.")
    else:
        print(f"Undid {last}: the memory is empty, new version {short(new.id)}.")
    return 0


def _import_parser(commands: _Commands) -> None:
    imp = commands.add_parser("import", help="record an SDK memory folder (FOLDER/memories) as one version")
    imp.add_argument("folder", metavar="FOLDER", help="the SDK tool's base_path, e.g. ./memory")
    imp.add_argument(
        "--replace", action="store_true", help="make the memory exactly the folder (default: add, refuse clashes)"
    )
    imp.add_argument("--max-file-bytes", metavar="N", help="largest file accepted (default: the vault's policy)")
    _who(imp, "cli")
    _json(imp)


def _import(vault: Vault, args: argparse.Namespace) -> int:
    most = _at_least_one(args.max_file_bytes, "--max-file-bytes", "bytes")
    result = vault.import_folder(
        args.folder, replace=args.replace, actor=args.actor, session=args.session, max_file_bytes=most
    )
    source = Path(args.folder) if Path(args.folder).name == "memories" else Path(args.folder) / "memories"
    if args.json:
        print_json(
            {
                "version": result.version.id if result.version else None,
                "files": result.files,
                "bytes": result.bytes,
                "empty_folders": list(result.empty_folders),
                "redacted": {path: list(kinds) for path, kinds in result.redacted.items()},
            }
        )
        return 0
    if result.version is None:
        print(f"Nothing to import: {source} holds no files." if not args.replace else "Nothing changed.")
    else:
        files = _files_and_bytes(result.files, result.bytes)
        print(f"Imported {files} from {source} as version {short(result.version.id)}.")
    if result.empty_folders:
        left = len(result.empty_folders)
        print(f"Left out {left} empty folder{'' if left == 1 else 's'}: git records files, not empty folders.")
    return 0


def _files_and_bytes(files: int, size: int) -> str:
    """``1 file (1 byte)``, ``2 files (1,024 bytes)``."""
    return f"{files} file{'s' if files != 1 else ''} ({size:,} byte{'s' if size != 1 else ''})"


def _export_parser(commands: _Commands) -> None:
    exp = commands.add_parser("export", help="write the memory as plaintext files to FOLDER/memories")
    exp.add_argument("folder", metavar="FOLDER", help="created if missing; FOLDER/memories must not exist")
    _at(exp)
    _json(exp)


def _export(vault: Vault, args: argparse.Namespace) -> int:
    result = vault.export_folder(args.folder, at=args.at)
    if args.json:
        print_json(
            {"version": result.version, "folder": str(result.folder), "files": result.files, "bytes": result.bytes}
        )
        return 0
    files = _files_and_bytes(result.files, result.bytes)
    if result.version is None:
        print(f"Exported {files} to {result.folder}: the vault has no versions yet.")
    else:
        print(f"Exported {files} of version {short(result.version)} to {result.folder}.")
    print("These files are PLAINTEXT (mode 0600): delete them when you are done.")
    return 0


def _chat_parser(commands: _Commands) -> None:
    chat = commands.add_parser("chat", help="talk to Claude with the vault as its memory (needs ANTHROPIC_API_KEY)")
    chat.add_argument(
        "--model",
        default=os.environ.get("VAULTMEM_MODEL", DEFAULT_MODEL),
        help=f"model (default {DEFAULT_MODEL}, or VAULTMEM_MODEL)",
    )
    chat.add_argument("--max-tokens", metavar="N", type=int, default=4096, help="per reply (default 4096)")
    chat.add_argument("--topic", metavar="TEXT", help="ask Claude to remember only what is relevant to TEXT")
    chat.add_argument("--no-context-editing", action="store_true", help="do not clear old tool results")
    _who(chat, "chat")


def _chat(vault: Vault, args: argparse.Namespace) -> int:
    from vaultmem.anthropic.tool import VaultMemoryTool
    from vaultmem.cli import chat

    # the key --signing-key or VAULTMEM_SIGNING_KEY gave, opened already (with
    # --signing-passphrase-file): the tool does not read the environment again
    memory = VaultMemoryTool(vault, actor=args.actor, session=args.session, signing_key=vault.signing_key(args.actor))
    return chat.run(
        memory,
        model=args.model,
        max_tokens=args.max_tokens,
        read_line=_read_line,
        out=sys.stdout,
        err=sys.stderr,
        topic=args.topic,
        context_editing=not args.no_context_editing,
    )


def _read_line(prompt: str) -> str:
    """``input()`` on a terminal (line editing); a plain read from a pipe, with no prompt."""
    if _is_terminal(sys.stdin):
        return input(prompt)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _expire_parser(commands: _Commands) -> None:
    expire = commands.add_parser("expire", help="delete files nobody read for a while, as one version")
    expire.add_argument("--unread-for", metavar="AGE", required=True, help="such as 30d, 12h, 2w (s, m, h, d, w)")
    expire.add_argument("--dry-run", action="store_true", help="only list the files that would be deleted")
    _json(expire)
    _who(expire, "cli")


def _with_unit(value: str | None, option: str, example: str) -> None:
    """Refuse an age given as a bare number: read as seconds, ``--keep-for
    365`` would erase every version older than six minutes, not a year."""
    kind = _below_one_or_bare(value) if value is not None else None
    n = (value or "").strip()
    if kind == "below one":
        raise UsageError(
            f"{option} {n} is not a duration of at least 1: write one with a unit, such as {option} {example}. "
            "Nothing was changed."
        )
    if kind == "bare":
        raise UsageError(
            f"{option} {n} has no unit: write {n}d for days (or {n}s, {n}m, {n}h, {n}w). Nothing was changed."
        )


def _below_one_or_bare(text: str) -> str | None:
    """``"below one"`` for a number under 1 (with a unit or not), ``"bare"``
    for one of at least 1 with no unit (digits of any script, as
    :func:`~vaultmem.core.policy.parse_duration` reads them), else None:
    parse_duration says what is wrong with anything else, and a number too
    long for 100 years even in seconds is too long whatever its unit."""
    match = re.fullmatch(r"\s*(-?)(\d+)\s*([smhdw]?)\s*", text, re.IGNORECASE)
    if match is None:
        return None
    sign, digits, unit = match.groups()
    number = digits.lstrip("0") or "0"
    count = int(number) if len(number) <= len(str(MAX_DURATION)) else MAX_DURATION + 1
    if sign or count == 0:
        return "below one"
    return "bare" if not unit and count <= MAX_DURATION else None


def _expire(vault: Vault, args: argparse.Namespace) -> int:
    _with_unit(args.unread_for, "--unread-for", "30d")
    result = vault.expire(args.unread_for, dry_run=args.dry_run, actor=args.actor, session=args.session)
    if args.json:
        print_json(
            {
                "dry_run": args.dry_run,
                "version": result.version.id if result.version else None,
                "files": [{"path": s.path, "last_used": when(s.last_used)} for s in result.stale],
            }
        )
        return 0
    for stale in result.stale:
        print(f"{when(stale.last_used)}  {stale.path}")
    count = f"{len(result.stale)} file{'s' if len(result.stale) != 1 else ''}"
    age = duration_words(args.unread_for)  # "1 day", not "1d"
    if not result.stale:
        print(f"Nothing to expire: every file was read or written in the last {age}.")
    elif args.dry_run:
        print(f"Would delete {count} unused for {age} or more (dry run: nothing changed).")
    elif result.version is not None:
        print(f"Deleted {count} unused for {age} or more: new version {short(result.version.id)}.")
    return 0


def _policy_show_parser(policy: _Commands) -> None:
    _json(policy.add_parser("show", help="the policy in force"))


def _policy_show(vault: Vault, args: argparse.Namespace) -> int:
    data = vault.policy.to_dict()
    if args.json:
        print_json(data)
        return 0
    width = max(len(name) for name in data)
    for name, value in data.items():
        print(f"{name:<{width}} {_policy_shown(name, value)}")
    return 0


def _policy_set_parser(policy: _Commands) -> None:
    policy_set = policy.add_parser("set", help="change fields, e.g. secrets=refuse max_files=500 expire_after=30d")
    policy_set.add_argument(
        "changes", metavar="FIELD=VALUE", nargs="*", help="a field and its new value (fields below)"
    )
    policy_set.add_argument(
        "--reset", action="store_true", help="start from the defaults, not the stored policy (repairs a damaged one)"
    )
    _who(policy_set, "cli")
    _json(policy_set)


def _policy_set(vault: Vault, args: argparse.Namespace) -> int:
    changes: dict[str, Any] = {}
    for item in args.changes:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{item!r} is not FIELD=VALUE (such as secrets=refuse).")
        changes[name.strip()] = _policy_value(name.strip(), raw.strip())
    if not changes and not args.reset:
        raise UsageError("give at least one FIELD=VALUE, or --reset (see `vaultmem policy set --help`)")
    try:
        before = vault.policy
    except VaultError:
        if not args.reset:
            raise
        before = Policy()
    after = vault.set_policy(actor=args.actor, session=args.session, reset=args.reset, **changes)
    changed = after.changed_fields(before)
    if after.secrets == "off" and (after.personal_data or after.patterns):
        unused = " and ".join(name for name in ("personal_data", "patterns") if after.to_dict()[name])
        verb = "take" if " and " in unused else "takes"
        print(  # a filter asked for and silently off would be worse than none
            f"Note: {unused} {verb} effect only while secrets is redact or refuse; secrets is off, so nothing "
            "written is scanned. Set secrets=redact or secrets=refuse to use them.",
            file=sys.stderr,
        )
    if "sync_remote" in changed and after.sync_remote not in (None, *(r.name for r in vault.remotes)):
        print(  # the policy is the vault's, for every clone: this one cannot follow it yet
            f"Note: this clone has no remote named {after.sync_remote!r}, so its memory tools work locally; add it "
            f"with `vaultmem remote add {after.sync_remote} URL`.",
            file=sys.stderr,
        )
    if args.json:
        old, new = before.to_dict(), after.to_dict()
        print_json({"changed": {name: {"from": old[name], "to": new[name]} for name in changed}, "policy": new})
        return 0
    if not changed:
        print("Nothing changed: the policy already says that.")
    for name in changed:
        print(f"{name}: {_policy_shown(name, before.to_dict()[name])} -> {_policy_shown(name, after.to_dict()[name])}")
    return 0


def _policy_shown(name: str, value: Any) -> str:
    from vaultmem.core.policy import format_duration, show_value

    return format_duration(value) if name in DURATIONS and value is not None else show_value(value)


def _policy_value(name: str, raw: str) -> Any:
    """A FIELD=VALUE value: JSON (numbers, true/false, null, objects) where it
    parses, else the text (secrets=refuse, expire_after=30d)."""
    if raw.lower() in ("none", "off", "null") and name != "secrets":
        return None
    if name in DURATIONS:
        _duration_with_unit(name, raw)
        return raw
    try:
        return json.loads(raw)
    except ValueError:  # not JSON, or a number of more digits than Python reads
        return raw
    except RecursionError:
        raise UsageError(f"the value of {name} is nested too deeply to read as JSON.") from None


def _duration_with_unit(name: str, raw: str) -> None:
    """Refuse a duration field given a number with no unit (read as seconds,
    ``content_retention=365`` would erase every version older than six
    minutes), or one below 1 (none: ``off``).  The policy file and the
    library keep seconds; only the command line needs the unit."""
    kind = _below_one_or_bare(raw)
    if kind == "below one":
        raise UsageError(
            f"{name}={raw} is not a duration of at least 1: write one with a unit, such as {name}=365d, or "
            f"{name}=off for none. Nothing was changed."
        )
    if kind == "bare":
        n = raw.strip()
        raise UsageError(
            f"{name}={n} has no unit: write {name}={n}d for days (or {n}s, {n}m, {n}h, {n}w). Nothing was changed."
        )


def _policy_log_parser(policy: _Commands) -> None:
    _json(policy.add_parser("log", help="every change of the policy, newest first"))


def _policy_log(vault: Vault, args: argparse.Namespace) -> int:
    versions = vault.policy_history()
    if args.json:
        print_json(
            [
                {
                    "id": v.id,
                    "time": when(v.time),
                    "actor": v.actor,
                    "session": v.session,
                    "changed": list(v.changed),
                    "policy": v.policy.to_dict(),
                }
                for v in versions
            ]
        )
        return 0
    for v in versions:
        print(visible(f"{short(v.id)}  {when(v.time)}  {v.actor}  {v.session or '-'}  {', '.join(v.changed)}"))
    return 0


# -- auditing and keys ---------------------------------------------------------------


def _verify_parser(commands: _Commands) -> None:
    verify = commands.add_parser("verify", help="check every version authenticates; exit 1 on any finding")
    verify.add_argument(
        "--checkpoint",
        metavar="FILE",
        action="append",
        default=[],
        help="also check main against the signed checkpoints in FILE (`vaultmem checkpoint --out`); repeatable",
    )
    _json(verify)


def _verify(vault: Vault, args: argparse.Namespace) -> int:
    texts = []
    for name in args.checkpoint:
        try:
            texts.append(Path(name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(
                f"cannot read the checkpoint file {name}: {getattr(err, 'strerror', None) or err}."
            ) from err
    with ProgressBar("verify") as bar:
        report = vault.verify(progress=bar, checkpoints=texts)
    if args.json:
        findings = [{"kind": f.kind, "version": f.version, "path": f.path, "detail": f.detail} for f in report.findings]
        counts = {
            "commits": report.commits,
            "blobs": report.blobs,
            "trees": report.trees,
            "erased": report.erased,
            "signed": report.signed,
            "unsigned": report.unsigned,
        }
        print_json({"ok": report.ok, **counts, "findings": findings})
    else:
        on = colour_on(sys.stdout)
        for f in report.findings:
            where = " ".join(part for part in (f.version and short(f.version), f.path) if part)
            print(f"{paint(f.kind + ':', RED, on)} {visible(where + ': ' if where else '')}{visible(f.detail)}")
        erased = f" ({report.erased} erased)" if report.erased else ""
        checked = (
            f"{_counted(report.commits, 'version')}, {_counted(report.blobs, 'file version')}{erased} and "
            f"{_counted(report.trees, 'tree')}"
        )
        if report.signed:
            checked += f", {report.signed} signature{'' if report.signed == 1 else 's'}"
        problems = len(report.findings)
        verdict = "no problems found" if report.ok else f"{problems} problem{'s' if problems != 1 else ''} found"
        print(f"Checked {checked}: {paint(verdict, GREEN if report.ok else RED, on)}.")
    return 0 if report.ok else 1


def _counted(n: int, noun: str) -> str:
    """``1 version``, ``2 versions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _find_parser(commands: _Commands) -> None:
    find = commands.add_parser(
        "find", help="every version of every file, in all of history, whose content matches; never the content"
    )
    find.add_argument("pattern", metavar="TEXT", help="the text to look for (a regular expression with --regex)")
    find.add_argument("--regex", action="store_true", help="TEXT is a Python regular expression")
    find.add_argument("-i", "--ignore-case", action="store_true", help="match upper and lower case alike")
    find.add_argument("--path", metavar="PATH", help="only files at or below PATH")
    _json(find)


def _find(vault: Vault, args: argparse.Namespace) -> int:
    found = vault.find(args.pattern, regex=args.regex, ignore_case=args.ignore_case, path=args.path)
    if args.json:
        print_json([match.to_dict() for match in found])
        return 0
    if not found:
        print("No version of any file matches.")
        return 0
    rows = [
        [
            short(m.version),
            when(m.time),
            visible(m.actor),
            f"{m.count} {'match' if m.count == 1 else 'matches'}",
            visible(m.path),
        ]
        for m in found
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row, match in zip(rows, found, strict=True):
        line = "  ".join([*(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)), row[4]])
        notes = [note for note, flag in (("current", match.current), ("in the name", match.in_name)) if flag]
        print(line + (f"  ({', '.join(notes)})" if notes else ""))
    versions = len({m.version for m in found})
    print(
        f"{len(found)} file {'version' if len(found) == 1 else 'versions'} in {versions} "
        f"{'version' if versions == 1 else 'versions'} of the memory."
    )
    return 0


def _forget_parser(commands: _Commands) -> None:
    forget = commands.add_parser(
        "forget", help="erase every version of a file (or of everything matching a text): keys destroyed, history kept"
    )
    forget.add_argument("path", metavar="PATH", nargs="?", help="the file or folder whose every version to erase")
    forget.add_argument("--matching", metavar="TEXT", help="instead of PATH: every version whose content holds TEXT")
    forget.add_argument("--regex", action="store_true", help="with --matching: TEXT is a Python regular expression")
    forget.add_argument("-i", "--ignore-case", action="store_true", help="with --matching: any case")
    forget.add_argument("--path", dest="within", metavar="PATH", help="with --matching: only files at or below PATH")
    forget.add_argument(
        "--reason", help="why, for the audit record (such as 'GDPR request 4411'); not needed with --dry-run"
    )
    forget.add_argument("--dry-run", action="store_true", help="only list the versions that would be erased")
    _json(forget)
    _who(forget, "cli")


def _forget(vault: Vault, args: argparse.Namespace) -> int:
    if (args.path is None) == (args.matching is None):
        raise VaultError("Error: give either a PATH or --matching TEXT.")
    common = {"reason": args.reason, "dry_run": args.dry_run, "actor": args.actor, "session": args.session}
    if args.matching is not None:
        result = vault.forget_matching(
            args.matching, regex=args.regex, ignore_case=args.ignore_case, path=args.within, **common
        )
    else:
        result = vault.forget(args.path, **common)
    return _erasure_report(result, args)


def _retention_parser(commands: _Commands) -> None:
    retention = commands.add_parser(
        "retention", help="erase versions older than the policy's content_retention (current files stay)"
    )
    retention.add_argument("--keep-for", metavar="AGE", help="instead of the policy's: such as 365d, 26w")
    retention.add_argument("--dry-run", action="store_true", help="only list the versions that would be erased")
    _json(retention)
    _who(retention, "cli")


def _retention(vault: Vault, args: argparse.Namespace) -> int:
    if args.keep_for is None and vault.policy.content_retention is None:  # said with this command's option
        raise UsageError(
            "this vault's policy sets no content_retention; set one (`vaultmem policy set content_retention=365d`) "
            "or give --keep-for AGE."
        )
    _with_unit(args.keep_for, "--keep-for", "365d")
    result = vault.apply_retention(args.keep_for, dry_run=args.dry_run, actor=args.actor, session=args.session)
    return _erasure_report(result, args)


def _migrate_parser(commands: _Commands) -> None:
    migrate = commands.add_parser("migrate", help="move a vault to storage format 2, where versions can be erased")
    migrate.add_argument(
        "--sealed-names",
        action="store_true",
        help="then seal names: from now on every name is stored as an opaque token",
    )
    migrate.add_argument(
        "--actor", metavar="NAME", default="cli", help="recorded as the author of the sealing version (default cli)"
    )
    _json(migrate)


def _migrate(vault: Vault, args: argparse.Namespace) -> int:
    was = (vault.keyring.format, vault.sealed_names)
    vault.migrate(sealed_names=args.sealed_names, actor=args.actor)
    migrated, sealed = vault.keyring.format != was[0], vault.sealed_names and not was[1]
    if args.json:
        print_json(
            {
                "format": vault.keyring.format,
                "migrated": migrated,
                "sealed_names": vault.sealed_names,
                "sealed_now": sealed,
            }
        )
        return 0
    if migrated:
        print(
            "Migrated to storage format 2: every version keeps its id and seal; versions written from now on "
            "can be erased one by one (`vaultmem forget`)."
        )
    if sealed:
        print(
            "Names are sealed: from this version on, trees, subjects and trailers hold opaque tokens; "
            "the versions before keep the names they were written with."
        )
    if not migrated and not sealed:
        print("Already in storage format 2" + (" with sealed names" if vault.sealed_names else "") + ": nothing to do.")
    return 0


def _redact_parser(commands: _Commands) -> None:
    redact = commands.add_parser("redact", help="erase one version of one file; the versions around it stay")
    redact.add_argument("version", metavar="VERSION", help="the version (id, main~N or a time) holding the content")
    redact.add_argument("path", metavar="PATH", help="the file")
    redact.add_argument("--reason", help="why, for the audit record; not needed with --dry-run")
    redact.add_argument("--dry-run", action="store_true", help="only show what would be erased")
    _json(redact)
    _who(redact, "cli")


def _redact(vault: Vault, args: argparse.Namespace) -> int:
    result = vault.redact(
        args.version, args.path, reason=args.reason, dry_run=args.dry_run, actor=args.actor, session=args.session
    )
    return _erasure_report(result, args)


def _erasure_report(result: ErasureResult, args: argparse.Namespace) -> int:
    if args.json:
        print_json(result.to_dict())
        return 0
    for item in result.versions:
        print(f"{short(item.version)}  {item.path}{'  (current)' if item.current else ''}")
    for item in result.already:
        print(f"{short(item.version)}  {item.path}  (erased before)")
    count = len(result.versions)
    what = f"{count} file {'version' if count == 1 else 'versions'}"
    if not result.versions:
        print("Nothing to erase: every version found was erased before." if result.already else "Nothing to erase.")
    elif result.dry_run:
        print(f"Would erase {what} (dry run: nothing changed).")
    elif result.commit is not None:
        print(f"Erased {what}: version {short(result.commit.id)} records it.")
    for note in result.notes:
        print(f"Note: {note}")
    return 0


def _key_list_parser(key: _Commands) -> None:
    _json(key.add_parser("list", help="the data keys, oldest first"))


def _key_list(vault: Vault, args: argparse.Namespace) -> int:
    keys = vault.keys()
    if args.json:
        print_json([{"id": k.id, "created": when(k.created), "active": k.active} for k in keys])
    else:
        for k in keys:
            print(f"{k.id}  {when(k.created)}{'  active' if k.active else ''}")
    return 0


def _key_change_parser(key: _Commands) -> None:
    change = key.add_parser("change", help="rewrap the data keys under a new key or passphrase")
    change.add_argument("--new-key-file", metavar="F", help=f"the new key's file (or {ENV_NEW_KEY} / a new passphrase)")
    change.add_argument(
        "--new-passphrase-file",
        metavar="F",
        help=f"file whose first line is the new passphrase (or {ENV_NEW_PASSPHRASE})",
    )
    _json(change)


def _key_change(vault: Vault, args: argparse.Namespace) -> int:
    found = _new_key(args)
    if found is None and _is_terminal(sys.stdin):
        found = {"passphrase": _ask_passphrase(str(vault.path), twice=True)}, "the new passphrase"
    if found is None:
        raise UsageError(
            f"no new key given: use --new-key-file F or --new-passphrase-file F, or set {ENV_NEW_KEY} or "
            f"{ENV_NEW_PASSPHRASE}."
        )
    source, what = found
    old = type(vault).protection(vault.path) or "key"  # what stops opening the vault
    try:
        vault.change_key(**source)
    except BadKeyError as err:
        if err.step != "is-passphrase":
            raise
        raise BadKeyError(  # the new key's words: a new passphrase comes from another option
            f"{err.fact} If it is a passphrase, use --new-passphrase-file FILE or {ENV_NEW_PASSPHRASE}."
        ) from err
    if args.json:
        print_json({"protection": _protection(source), "opens_with": what})
    else:
        print(f"The vault now opens with {what} only; the old {old} no longer opens it.")
    return 0


def _new_key(args: argparse.Namespace) -> tuple[KeyArgs, str] | None:
    """A new key given without a prompt (``key change``, or ``pull`` after a key
    change elsewhere): --new-key-file, --new-passphrase-file, VAULTMEM_NEW_KEY,
    VAULTMEM_NEW_PASSPHRASE; with how to name it to people.  None if none is."""
    if args.new_key_file:
        from vaultmem.core.crypto import read_key_file

        read_key_file(args.new_key_file, ENV_NEW_KEY)  # the key's text given as the path: refused unshown
        return {"key_file": args.new_key_file}, f"the key in {args.new_key_file}"
    if getattr(args, "new_passphrase_file", None):
        from vaultmem.core.crypto import read_passphrase_file

        return {"passphrase": read_passphrase_file(args.new_passphrase_file, ENV_NEW_PASSPHRASE)}, "the new passphrase"
    if os.environ.get(ENV_NEW_KEY):
        return {"key": os.environ[ENV_NEW_KEY]}, f"the key in {ENV_NEW_KEY}"
    if os.environ.get(ENV_NEW_PASSPHRASE):
        return {"passphrase": _unicode(os.environ[ENV_NEW_PASSPHRASE], ENV_NEW_PASSPHRASE)}, "the new passphrase"
    return None


def _key_rotate_parser(key: _Commands) -> None:
    rotate = key.add_parser("rotate", help="start a new data key for new writes")
    rotate.add_argument("--reencrypt", action="store_true", help="also re-encrypt every current file under it")
    rotate.add_argument(
        "--actor", metavar="NAME", default="cli", help="recorded on the re-encryption's version (default cli)"
    )
    _json(rotate)


def _key_rotate(vault: Vault, args: argparse.Namespace) -> int:
    before = vault.head()
    if args.reencrypt:
        with ProgressBar("re-encrypt") as bar:
            info = vault.rotate_key(reencrypt=True, actor=args.actor, progress=bar)
    else:
        info = vault.rotate_key(actor=args.actor)
    if args.json:
        after = vault.head()
        made = str(after) if after is not None and after != before else None
        print_json({"key": info.id, "created": when(info.created), "reencrypted": args.reencrypt, "version": made})
        return 0
    if args.reencrypt:
        print(f"Started data key {info.id} and re-encrypted every current file with it.")
    else:
        print(f"Started data key {info.id}: new versions use it.")
    print("Older data keys stay in the keyring to read the history.")
    return 0


def _git_setup_parser(commands: _Commands) -> None:
    setup = commands.add_parser("git-setup", help="let plain git show decrypted diffs to whoever has the key")
    setup.add_argument("--key-file", dest="textconv_key_file", metavar="F", help="key file git should use")
    _json(setup)


def _git_setup(vault: Vault, args: argparse.Namespace) -> int:
    key_file = ["--key-file", str(Path(args.textconv_key_file).resolve())] if args.textconv_key_file else []
    command = textconv_command(sys.executable, key_file)
    # git's config, where the driver and the signers' files are recorded, takes
    # text: a folder whose name is not UTF-8 is refused before anything is set.
    paths = [("the vault's folder", str(Path(vault.path).resolve())), ("Python", sys.executable)]
    for what, path in [*paths, *([("the key file", key_file[1])] if key_file else [])]:
        if not is_unicode(path):
            raise UsageError(
                f"{what} {path!r} holds bytes that are not UTF-8, which git's config cannot record; "
                "move or rename it so that its path is UTF-8. Nothing was set up."
            )
    passphrase_vault = type(vault).protection(vault.path) == "passphrase"
    if key_file:
        _check_textconv_key_file(vault, args.vault, args.textconv_key_file, passphrase_vault)
    vault.configure_textconv(command)
    allowed, revoked = vault.configure_signers()
    if args.json:
        print_json(
            {
                "textconv": command,
                "key_file": key_file[1] if key_file else None,
                "allowed_signers": str(allowed),
                "revoked_keys": str(revoked),
                "signers": len(vault.signers.entries),
            }
        )
        return 0
    env = ENV_PASSPHRASE if passphrase_vault else ENV_KEY
    holder = f"the key file {args.textconv_key_file} or {env}" if args.textconv_key_file else env
    print(f"git log -p and git diff on {args.vault} now show decrypted text to whoever has {holder};")
    print("everyone else sees the encrypted blobs.")
    if vault.signers:
        print(f"git verify-commit and git log --show-signature check signatures against {allowed}.")
    return 0


def _check_textconv_key_file(vault: Vault, name: str, key_file: str, passphrase_vault: bool) -> None:
    """Refuse a key file git could not decrypt with: every diff would show
    ciphertext and advise running git-setup again."""
    if passphrase_vault:
        raise UsageError(
            f"{name} is protected by a passphrase, which no key file opens; "
            f"run `vaultmem git-setup` without --key-file and give git the passphrase in {ENV_PASSPHRASE}. "
            "Nothing was set up."
        )
    try:
        type(vault).open(vault.path, key_file=key_file).close()
    except WrongKeyError:
        raise UsageError(
            f"the key file {key_file} does not open {name}, so git could not decrypt with it. Nothing was set up."
        ) from None


NOT_INSTALLED = "[vaultmem: not decrypted: vaultmem is not installed where git runs; run `vaultmem git-setup` again]"


def textconv_command(interpreter: str, options: list[str]) -> str:
    """The shell command git runs on each side of a diff (git appends the
    file).  It names no vault: git runs it inside the repository it reads,
    so a moved vault keeps working.  It tries the interpreter that ran
    ``git-setup`` (``-P``: the vault's ``vaultmem`` state folder must not
    shadow the package), then ``vaultmem`` on git's PATH; with neither, it
    prints a one-line marker and the file unchanged.  It always exits 0, so
    git never breaks and never shows ciphertext without saying why."""
    python = shlex.quote(interpreter)
    rest = shlex.join([*options, "textconv"])
    return (
        "vaultmem_textconv() { "
        f'{{ [ -x {python} ] && {python} -P -m vaultmem {rest} "$1" 2>/dev/null; }} || '
        f'{{ command -v vaultmem >/dev/null 2>&1 && vaultmem {rest} "$1" 2>/dev/null; }} || '
        f'{{ printf "%s\\n" {shlex.quote(NOT_INSTALLED)}; cat "$1"; }}; '
        "}; vaultmem_textconv"
    )


# -- serving MCP clients (docs/mcp.md) ---------------------------------------------------


def _mcp_parser(commands: _Commands) -> None:
    mcp = commands.add_parser(
        "mcp", help="serve the memory to MCP clients (Claude Code, Claude Desktop) over stdio, or HTTP with --http"
    )
    mcp.add_argument("--actor", metavar="NAME", default="claude", help="recorded as every version's author")
    mcp.add_argument("--read-only", action="store_true", help="offer view and the audit tools only; refuse writes")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    mcp.add_argument("--host", metavar="ADDRESS", default="127.0.0.1", help="with --http: listen here (127.0.0.1)")
    mcp.add_argument("--port", metavar="N", type=int, default=8765, help="with --http: listen on this port (8765)")
    mcp.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token clients send, made (mode 0600) if missing (default VAULT/vaultmem/mcp-token"
        "; VAULTMEM_MCP_TOKEN gives it instead)",
    )
    mcp.add_argument(
        "--allow-host",
        metavar="HOST",
        action="append",
        default=[],
        help="with --http: also accept requests whose Host is HOST (name:port, or name:* for any port), the name "
        "clients or a proxy reach it by; repeatable",
    )
    mcp.add_argument(
        "--allow-origin",
        metavar="URL",
        action="append",
        default=[],
        help="with --http: also accept requests whose Origin is URL (browsers); repeatable",
    )
    mcp.add_argument(
        "--request-timeout",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="with --http: close a connection that takes longer to send a whole request (default 30)",
    )
    mcp.add_argument(
        "--max-request-bytes",
        metavar="N",
        type=int,
        default=1_048_576,
        help="refuse a tool call sent in more bytes: its line (stdio) or body (HTTP) (default 1048576)",
    )


def _token_as_token_file(name: str, problem: Callable[[str], str | None]) -> bool:
    """Whether ``--token-file``'s value, naming no file, is a token rather than
    a path: one a token may be, and not plainly a path (so a file would be
    made named by the token, and shown)."""
    from vaultmem.core.crypto import looks_like_a_path

    return not os.path.lexists(name) and problem(name) is None and not looks_like_a_path(name)


def _mcp(vault: Vault, args: argparse.Namespace) -> int:
    # What the command line can get wrong is refused before the mcp package
    # loads (a second or more): a client set up wrong hears so at once.
    if not 0 < args.port < 65536:
        raise UsageError("--port must be between 1 and 65535.")
    if args.max_request_bytes < 1:  # named as the option it was given by
        raise UsageError(f"--max-request-bytes must be at least 1 (got {args.max_request_bytes}).")
    check_who(args.actor, None)  # every version's author: refused now, not at each write
    if args.http and not 0 < args.request_timeout <= 3600:
        raise UsageError("--request-timeout must be more than 0 and at most 3600 seconds.")
    if importlib.util.find_spec("mcp") is None:  # before a token file is made for a server that cannot run
        raise UsageError("vaultmem mcp needs the mcp extra: pip install 'vaultmem[mcp]' (No module named 'mcp').")
    token, where = _mcp_token(vault, args) if args.http else ("", "")
    try:
        import anyio

        from vaultmem.mcp import web as mcp_http
        from vaultmem.mcp.server import MemoryServer, serve_stdio
    except ImportError as err:
        raise UsageError(f"vaultmem mcp needs the mcp extra: pip install 'vaultmem[mcp]' ({err}).") from err
    memory = MemoryServer(vault, actor=args.actor, read_only=args.read_only, max_request_bytes=args.max_request_bytes)
    sys.setswitchinterval(0.0005)  # the event loop answers sooner when a write's background work holds the GIL
    if not args.http:
        anyio.run(serve_stdio, memory.build(inline=True), args.max_request_bytes)
        return 0
    app = mcp_http.http_app(
        memory.build(),
        token=token,
        host=args.host,
        port=args.port,
        origins=args.allow_origin,
        hosts=args.allow_host,
        max_request_bytes=args.max_request_bytes,
    )
    sock = mcp_http.listen(args.host, args.port)
    print(
        f"vaultmem: serving {args.vault} over MCP at {mcp_http.url(args.host, args.port)} "
        f"as {args.actor}{' (read-only)' if args.read_only else ''}; clients send the token in {where}",
        file=sys.stderr,
        flush=True,
    )
    mcp_http.serve(app, sock, request_timeout=args.request_timeout)
    return 0


def _mcp_token(vault: Vault, args: argparse.Namespace) -> tuple[str, str]:
    """The bearer token ``vaultmem mcp --http`` serves with, and where it came from."""
    from vaultmem.mcp import bearer as mcp_token

    token = os.environ.get(mcp_token.ENV_TOKEN, "").strip()
    token_file = (
        Path(args.token_file) if args.token_file else Path(vault.path).resolve() / "vaultmem" / mcp_token.TOKEN_FILE
    )
    where = mcp_token.ENV_TOKEN if token else str(token_file)
    if not token and args.token_file and _token_as_token_file(args.token_file, mcp_token.token_problem):
        raise UsageError(
            "--token-file was given what looks like the token itself, where the file's path belongs; give the "
            f"file's path, or the token in {mcp_token.ENV_TOKEN}. (It is not shown here, and no file was made.)"
        )
    if not token:
        token = mcp_token.load_or_make_token(token_file)
    elif (problem := mcp_token.token_problem(token)) is not None:
        raise UsageError(f"{mcp_token.ENV_TOKEN} {problem}; give a token of at least 32 characters.")
    return token, where


# -- sharing through a git server (docs/sync.md) ---------------------------------------


def _clone_parser(commands: _Commands) -> None:
    clone = commands.add_parser("clone", help="copy a shared vault from a git server and open it with its key")
    clone.add_argument("url", metavar="URL", help="a path, file://, git://, ssh:// or https:// URL of the vault")
    clone.add_argument("path", metavar="PATH", help="the new vault's folder (missing or empty)")
    _json(clone)


def _clone(args: argparse.Namespace) -> int:
    from vaultmem.vault import Vault

    _check_clone_folder(args.path)
    try:
        source = _key_args(args, create=False, folder=args.path)
    except UsageError as err:  # no key, or two: said as every refused clone says it
        raise UsageError(f"{str(err).rstrip('.')}. Nothing was made.", err.usage) from err
    with ProgressBar("clone") as bar, Vault.clone(args.url, args.path, progress=bar, **source) as vault:
        count = len(vault.history())
    if args.json:
        print_json({"vault": str(Path(args.path).resolve()), "url": args.url, "versions": count})
    else:
        print(f"Cloned {args.url} into {args.path}: {count} version{'s' if count != 1 else ''}.")
    return 0


def _check_clone_folder(path: str) -> None:
    """Refuse, before any work, a clone whose folder cannot be made: the clone
    is made beside it (in its parent, or the nearest folder above that exists)
    and renamed into place, so that folder must be one the user can write."""
    above = Path(path).parent
    while not above.exists() and above != above.parent:
        above = above.parent
    shown = str(above)  # as the user gave it: relative stays relative
    if not above.is_dir():
        raise UsageError(f"cannot clone into {path}: {shown} is a file, not a folder. Nothing was made.")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot clone into {path}: the folder {shown} cannot be written (permission denied); "
            "choose a folder you can write to. Nothing was made."
        )


def _remote_parser(commands: _Commands) -> _Commands:
    return commands.add_parser(
        "remote", help="add, list or remove the git servers the vault is shared through"
    ).add_subparsers(dest="remote_command", required=True, metavar="REMOTE_COMMAND")


def _remote_add_parser(remote: _Commands) -> None:
    add = remote.add_parser("add", help="share the vault through a git server")
    add.add_argument("name", metavar="NAME", help="the remote's name, such as origin")
    add.add_argument("url", metavar="URL", help="a path, file://, git://, ssh:// or https:// URL (no password in it)")
    _json(add)


def _remote_add(vault: Vault, args: argparse.Namespace) -> int:
    added = vault.add_remote(args.name, args.url)
    if args.json:
        print_json({"name": added.name, "url": added.url})
    else:
        print(f"Added the remote {added.name}: {args.url}")  # as given; a path is stored absolute
    return 0


def _remote_list_parser(remote: _Commands) -> None:
    _json(remote.add_parser("list", help="the vault's remotes: name and URL"))


def _remote_list(vault: Vault, args: argparse.Namespace) -> int:
    found = vault.remotes
    if args.json:
        print_json([{"name": r.name, "url": r.shown} for r in found])
    else:
        for r in found:
            print(f"{r.name}\t{r.shown}")
    return 0


def _remote_remove_parser(remote: _Commands) -> None:
    remove = remote.add_parser("remove", help="stop sharing through a remote (the server keeps its copy)")
    remove.add_argument("name", metavar="NAME", help="the remote's name")
    _json(remove)


def _remote_remove(vault: Vault, args: argparse.Namespace) -> int:
    vault.remove_remote(args.name)
    if args.json:
        print_json({"removed": args.name})
    else:
        print(f"Removed the remote {args.name}; the server keeps its copy.")
    return 0


def _transfer_parser(commands: _Commands, name: str, purpose: str) -> None:
    sub = commands.add_parser(name, help=purpose)
    sub.add_argument("remote", metavar="REMOTE", nargs="?", default="origin", help="the remote (default origin)")
    _json(sub)


def _push_parser(commands: _Commands) -> None:
    _transfer_parser(commands, "push", "send new versions, keys and policy to a remote; never forced")


def _merge_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--actor", metavar="NAME", default="cli", help="recorded as the author of a merge the pull makes (default cli)"
    )
    sub.add_argument(
        "--policy-from",
        choices=("ours", "theirs"),
        help="when both sides set a policy field differently: whose value wins (default: refuse, change nothing)",
    )


def _pull_parser(commands: _Commands) -> None:
    _transfer_parser(commands, "pull", "bring a remote's new versions, keys and policy here; merge if both wrote")
    pull = commands.choices["pull"]
    pull.add_argument(
        "--new-key-file",
        metavar="F",
        help=f"after a key change on another clone: the new key's file (or {ENV_NEW_KEY} / {ENV_NEW_PASSPHRASE})",
    )
    _merge_options(pull)


def _sync_parser(commands: _Commands) -> None:
    _transfer_parser(commands, "sync", "pull (merging if both sides wrote), then push")
    _merge_options(commands.choices["sync"])


def _moved(transfer: Any) -> dict[str, dict[str, str | None]]:
    return {branch: {"from": old, "to": new} for branch, (old, new) in transfer.moved.items()}


def _transfer_data(transfer: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"moved": _moved(transfer)}
    if transfer.merge is not None:
        data["merge"] = transfer.merge.to_dict()
    return data


def _say_moved(verb: str, transfer: Any) -> None:
    absent, ahead = getattr(transfer, "absent", ()), getattr(transfer, "ahead", ())
    if not transfer.moved:
        if absent or ahead:  # a pull: the remote lacks what this vault holds
            print(f"{verb}: nothing new on {transfer.remote}.")
        else:
            print(f"{verb}: nothing to move; {transfer.remote} and this vault agree.")
    for branch, (old, new) in transfer.moved.items():
        how = " (merged)" if branch == "main" and transfer.merge is not None else ""
        print(f"{verb} {branch}: {short(old) if old else '(new)'}..{short(new)}{how}")
    if absent:
        names, them = " or ".join(absent), "them" if len(absent) > 1 else "it"
        branches = "branches" if len(absent) > 1 else "branch"
        print(f"{transfer.remote} has no {names} {branches}, which this vault holds; the next push puts {them} there.")
    if ahead and not transfer.moved:
        lacks = f"This vault holds versions of {' and '.join(ahead)} that {transfer.remote} lacks"
        print(f"{lacks}; the next push sends them.")
    merge = transfer.merge
    if merge is None:
        return
    count = len(merge.changed)
    paths = "path" if count == 1 else "paths"
    print(f"Merged {short(merge.merged)} from {transfer.remote}: {count} {paths} changed here.")
    for path in merge.text_merged:
        print(f"  merged as text: {path}")
    for path, beside in merge.conflicts:
        print(f"  conflict: {path} kept both versions; the other is {beside}")
    for path in merge.kept:
        print(f"  kept: {path} (changed on one side, deleted on the other)")
    for old, new in merge.renamed:
        print(f"  followed a rename: {old} -> {new}")


def _push(vault: Vault, args: argparse.Namespace) -> int:
    return _one_way(args, "push", "Pushed", vault.push)


def _pull(vault: Vault, args: argparse.Namespace) -> int:
    found = _new_key(args)
    new_key: KeyArgs = found[0] if found is not None else {}
    return _one_way(
        args,
        "pull",
        "Pulled",
        lambda remote, progress: vault.pull(
            remote, progress, actor=args.actor, policy_from=args.policy_from, **new_key
        ),
    )


def _one_way(args: argparse.Namespace, name: str, verb: str, move: Callable[..., Any]) -> int:
    with ProgressBar(name) as bar:
        transfer = move(args.remote, progress=bar)
    if args.json:
        data = {"remote": args.remote, **_transfer_data(transfer)}
        if name == "pull":  # what the remote lacks, as the plain output says it
            data.update(absent=list(transfer.absent), ahead=list(transfer.ahead))
        print_json(data)
    else:
        _say_moved(verb, transfer)
    return 0


def _sync(vault: Vault, args: argparse.Namespace) -> int:
    with ProgressBar("sync") as bar:
        pulled, pushed = vault.sync(args.remote, progress=bar, actor=args.actor, policy_from=args.policy_from)
    if args.json:
        pulled_data = _transfer_data(pulled)
        print_json({"remote": args.remote, "pulled": pulled_data.pop("moved"), **pulled_data, "pushed": _moved(pushed)})
    else:
        _say_moved("Pulled", pulled)
        _say_moved("Pushed", pushed)
    return 0


def _completion_parser(commands: _Commands) -> None:
    completion = commands.add_parser("completion", help="print the shell code that completes vaultmem's commands")
    completion.add_argument("shell", choices=SHELLS, help="the shell: " + ", ".join(SHELLS))


# Where each shell's completion goes, in one command (docs/cli.md).
SHELLS = ("bash", "zsh", "fish")


def _textconv_parser(commands: _Commands) -> None:
    textconv = commands.add_parser("textconv", help="print a blob's decrypted text (run by git)")
    textconv.add_argument("file", help="the file git hands over: one side of a diff")


def _textconv(args: argparse.Namespace) -> int:
    """Run by git on one side of a diff: the blob's text; or, when it cannot
    be decrypted here, one marker line saying why and the file unchanged.  A
    file that is not a vaultmem blob is printed as it is."""
    with open(args.file, "rb") as fh:
        data = fh.read()
    # git runs the driver in the repository it reads and exports GIT_DIR:
    # that is the vault, wherever it was when `git-setup` ran.
    vault_path = os.environ.get("GIT_DIR") or args.vault or "."
    text, why = _decrypt_for_git(vault_path, args.key_file, data)
    if text is not None:
        write_exact(text)
    else:
        if why:
            sys.stdout.write(f"[vaultmem: not decrypted: {why}]\n")
            sys.stdout.flush()
        sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def _decrypt_for_git(vault_path: str, key_file: str | None, data: bytes) -> tuple[str | None, str]:
    """The blob's text, or None and why not ("" when it is no vaultmem blob).
    Tries each key source that needs no prompt."""
    from vaultmem.core.crypto import BLOB_MAGIC
    from vaultmem.errors import ErasedError, IntegrityError, NotAVaultError, WrongKeyError

    if not data.startswith(BLOB_MAGIC + b" "):
        return None, ""
    from vaultmem.vault import Vault

    sources: list[KeyArgs] = []
    if key_file:
        sources.append({"key_file": key_file})
    if os.environ.get(ENV_KEY):
        sources.append({"key": os.environ[ENV_KEY]})
    if os.environ.get(ENV_PASSPHRASE):
        sources.append({"passphrase": os.environ[ENV_PASSPHRASE]})
    why = (
        f"no key given here opens this vault (set {ENV_KEY} or {ENV_PASSPHRASE}, "
        "or run `vaultmem git-setup --key-file F`)"
    )
    for source in sources:
        try:
            with Vault.open(vault_path, **source) as vault:
                path, text = vault.decrypt_blob(data)
                if vault.sealed_names:  # the diff's header names a token: say which file it is
                    return f"[vaultmem: {path}]\n{text}", ""
                return text, ""
        except NotAVaultError:
            return None, f"{os.path.abspath(vault_path)} is not a vault this vaultmem reads"
        except ErasedError as err:
            return None, err.fact.removeprefix("Error: ").rstrip(".")
        except IntegrityError:
            return None, "the blob failed its integrity check (run `vaultmem verify`)"
        except (WrongKeyError, VaultError):
            continue
    return None, why


COMMANDS: dict[str, Callable[[Vault, argparse.Namespace], int]] = {
    "call": _call,
    "ls": _ls,
    "cat": _cat,
    "log": _log,
    "show": _show,
    "diff": _diff,
    "restore": _restore,
    "undo": _undo,
    "verify": _verify,
    "find": _find,
    "forget": _forget,
    "redact": _redact,
    "migrate": _migrate,
    "retention": _retention,
    "key list": _key_list,
    "key change": _key_change,
    "key rotate": _key_rotate,
    "git-setup": _git_setup,
    "remote add": _remote_add,
    "remote list": _remote_list,
    "remote remove": _remote_remove,
    "push": _push,
    "pull": _pull,
    "sync": _sync,
    "import": _import,
    "expire": _expire,
    "policy show": _policy_show,
    "policy set": _policy_set,
    "policy log": _policy_log,
    "export": _export,
    "chat": _chat,
    **signers_cli.HANDLERS,
    "mcp": _mcp,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
