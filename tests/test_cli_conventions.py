"""The command line behaves as git, gh and pass do (issue 15): a mistyped
command or option gets a suggestion, and every command's ``--help`` says
what it is for, explains its arguments and shows one example that parses."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from vaultmem.cli.app import build_parser, main
from vaultmem.core.policy import Policy


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaultmem: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["lgo"], "`log`"),
        (["veriyf"], "`verify`"),
        (["git-stup"], "`git-setup`"),
        (["key", "lst"], "`list`"),
        (["policy", "shwo"], "`show`"),
        (["log", "--sinse", "2026-11-01"], "`--since`"),
        (["ls", "--jsn"], "`--json`"),
    ],
)
def test_a_mistyped_command_or_option_gets_a_suggestion(
    capsys: pytest.CaptureFixture[str], argv: list[str], suggestion: str
) -> None:
    err = error_of(capsys, *argv)
    assert f"Did you mean {suggestion}?" in err, err


def test_nothing_close_gets_no_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(capsys, "qqqqqqqqq")
    assert "Did you mean" not in err
    assert "'qqqqqqqqq' is not a vaultmem command" in err


def _leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                groups = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                found += _leaves(sub, f"{prefix}{name} ") if groups else [(f"{prefix}{name}", sub)]
    return found


LEAVES = _leaves(build_parser())


@pytest.mark.parametrize(("name", "parser"), LEAVES, ids=[name for name, _ in LEAVES])
def test_every_commands_help_has_a_purpose_explained_arguments_and_an_example_that_parses(
    name: str, parser: argparse.ArgumentParser
) -> None:
    text = parser.format_help()
    assert parser.description and "\n" not in parser.description.strip(), f"{name}: no one-line purpose"
    for action in parser._actions:
        if action.help is None or action.help == "":
            pytest.fail(f"{name}: {action.dest} is not explained")
    assert "\nexample:\n" in text, f"{name}: no example"
    example = text.split("\nexample:\n", 1)[1].strip().splitlines()[0].strip()
    argv = shlex.split(example)
    assert argv[0] == "vaultmem" and " ".join(argv[1:]).startswith(name), example
    parsed = build_parser().parse_args(argv[1:])  # the example is a real command line
    assert parsed.command == name.split()[0]


def test_policy_set_help_lists_every_field() -> None:
    policy_set = dict(LEAVES)["policy set"]
    text = policy_set.format_help()
    for field in dataclasses.fields(Policy):
        assert field.name in text, field.name
