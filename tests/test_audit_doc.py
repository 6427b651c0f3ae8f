"""docs/audit.md and docs/cli.md are kept true by running them.

``test_the_audit_guide_shows_real_output`` builds the example vault the guide
describes (a support bot's sessions at fixed times, one of them bad), runs every
``$ `` line of the guide's ``console`` blocks in one bash session (cwd a
temporary folder, ``VAULTMEM_VAULT`` and ``VAULTMEM_KEY`` set, standard error
shown as a terminal would) and compares each command's output with the lines
under it.  Hex ids of 7 or more characters are wildcards, since encryption is
randomised; but an id must stand for the same real id everywhere in the guide,
and an id the guide types into a later command is replaced by the real one.

The guide must hold at any hour and in any time zone: it runs under two faked
times of day (``GIT_TEST_DATE_NOW``, which git reads instead of its clock) and
two ``TZ`` values, four runs in all.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import budget

from vaultmem import generate_key
from vaultmem.cli import example
from vaultmem.cli.app import build_parser

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEX = re.compile(r"\b[0-9a-f]{7,}\b")

ACME = "# Acme Corp\n- Contact: Dana Reyes (IT lead)\n- Prefers e-mail follow-ups, never phone calls.\n"
REFUNDS = "# Refunds\n- Up to 100 EUR: refund at once, no approval needed.\n- Above 100 EUR: ask a supervisor first.\n"
GLOBEX = "# Globex\n- Contact: Sam Okafor\n- Enterprise plan since 2025; 24/7 support.\n"


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def build_example(path: Path, key: str) -> None:
    """The vault of docs/audit.md, as `vaultmem demo --example` builds it."""
    example.build(path, key)


# -- reading the guide -------------------------------------------------------------------


@dataclass
class Step:
    line: int  # where the command is in the guide (1-based)
    command: str
    expected: list[str]


def console_steps(text: str) -> list[Step]:
    """The ``$ `` commands of every ```console block, each with the lines under it."""
    steps: list[Step] = []
    in_console = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            continue
        if not in_console:
            continue
        if line.startswith("$ "):
            steps.append(Step(number, line[2:], []))
        elif steps and steps[-1].line < number:
            steps[-1].expected.append(line)
    return steps


class Ids:
    """Which real id each id printed in the guide stands for."""

    def __init__(self) -> None:
        self.real: dict[str, str] = {}

    def match(self, expected: str, actual: str) -> bool:
        """Whether ``actual`` is ``expected`` with its hex ids replaced consistently."""
        pattern, tokens, pos = "", [], 0
        for found in HEX.finditer(expected):
            pattern += re.escape(expected[pos : found.start()]) + f"([0-9a-f]{{{len(found.group())}}})"
            tokens.append(found.group())
            pos = found.end()
        matched = re.fullmatch(pattern + re.escape(expected[pos:]), actual)
        if matched is None:
            return False
        pairs = list(zip(tokens, matched.groups(), strict=True))
        if not all(self._consistent(doc, real) for doc, real in pairs):
            return False
        self.real.update(pairs)
        return True

    def _consistent(self, doc: str, real: str) -> bool:
        for known_doc, known_real in self.real.items():
            shorter = min(len(doc), len(known_doc))
            if (doc[:shorter] == known_doc[:shorter]) != (real[:shorter] == known_real[:shorter]):
                return False
        return True

    def substitute(self, command: str) -> str:
        """An id the guide types into a command becomes the real id it stands for."""

        def real(found: re.Match[str]) -> str:
            token = found.group()
            for doc, actual in self.real.items():
                if doc.startswith(token):
                    return actual[: len(token)]
            return token

        return HEX.sub(real, command)


def setup_commands(text: str) -> list[Step]:
    """The guide's own setup: the lines of its first ```sh block, when that
    block builds the example (a reader copies them, so the test runs them)."""
    found = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S)
    if found is None or "vaultmem demo --example" not in found.group(1):
        return []
    first = text[: found.start()].count("\n") + 2
    return [Step(first + n, line, []) for n, line in enumerate(found.group(1).splitlines()) if line.strip()]


def doc_environment(tmp_path: Path, key: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment whose `vaultmem` is this checkout's, plus ``extra``;
    ``VAULTMEM_VAULT`` and ``VAULTMEM_KEY`` set unless the guide sets them up
    itself (``key`` None)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "vaultmem"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vaultmem "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    return {
        **keep,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        **({"VAULTMEM_VAULT": "support.vault", "VAULTMEM_KEY": key} if key is not None else {}),
        **(extra or {}),
    }


def check_guide(doc: Path, tmp_path: Path, extra_env: dict[str, str] | None = None) -> list[str]:
    """Run the guide on a fresh example vault (``extra_env`` added to its
    environment); the mismatches (none when it is true)."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    text = doc.read_text(encoding="utf-8")
    setup = setup_commands(text)
    key: str | None = None
    if not setup:
        key = generate_key()
        build_example(work / "support.vault", key)
    steps = console_steps(text)
    ids = Ids()
    outputs = _run_with_ids(setup + steps, ids, work, doc_environment(tmp_path, key, extra_env))
    problems: list[str] = []
    for step, actual in zip(setup, outputs, strict=False):
        if step.command.startswith("export "):
            ok = actual == []
        else:
            ok = bool(actual) and actual[0].startswith("Built the example vault")
        if not ok:
            problems.append(f"docs/{doc.name}:{step.line}: the setup `{step.command}` printed {actual}")
    for step, actual in zip(steps, outputs[len(setup) :], strict=True):
        expected = [line.rstrip() for line in step.expected]
        got = [line.rstrip() for line in actual]
        if len(expected) != len(got) or not all(ids.match(e, g) for e, g in zip(expected, got, strict=True)):
            problems.append(
                f"docs/{doc.name}:{step.line}: $ {step.command}\n--- the guide shows\n"
                + "\n".join(expected)
                + "\n--- the command printed\n"
                + "\n".join(got)
            )
    return problems


def _run_with_ids(steps: list[Step], ids: Ids, cwd: Path, env: dict[str, str]) -> list[list[str]]:
    """Run the steps in one bash session, learning ids from each output before
    substituting them into the commands that follow (bash is fed step by step)."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,  # no terminal: nothing may prompt
    )
    assert proc.stdin is not None and proc.stdout is not None
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    proc.stdin.write("exec 2>&1\n")
    outputs: list[list[str]] = []
    try:
        for i, step in enumerate(steps):
            marker = f"@@vaultmem-doc-{i}-{os.getpid()}@@"
            # braces, not a subshell: variables set by a command stay for the next ones
            proc.stdin.write(f"{{ {ids.substitute(step.command)}\n}} </dev/null\nprintf '\\n%s\\n' '{marker}'\n")
            proc.stdin.flush()
            lines: list[str] = []
            for line in proc.stdout:
                if line.rstrip("\n") == marker:
                    break
                lines.append(line.rstrip("\n"))
            else:
                raise AssertionError(f"the guide's shell stopped at line {step.line}: {step.command}")
            if lines and lines[-1] == "":
                lines.pop()  # the newline printed before the marker (else it ended an unfinished line)
            outputs.append(lines)
            expected = [line.rstrip() for line in step.expected]
            for e, g in zip(expected, lines, strict=False):
                ids.match(e, g.rstrip())  # learn the ids for the commands that follow
    finally:
        watchdog.cancel()
        proc.stdin.close()
        proc.wait(timeout=60)
    return outputs


# The example's versions were written on 2-5 November 2026; the guide is read later,
# early in the morning or late in the evening (UTC), in UTC or in Los Angeles.
NOWS = {"early": "2026-11-10 05:30:00", "late": "2026-11-10 22:45:00"}
ZONES = ["UTC", "America/Los_Angeles"]


def git_reads_a_bare_date_as(day: str, now: float, zone: str) -> int:
    """What git makes of ``--since=DAY`` (a date without a time) at ``now`` in
    ``zone``: that day at the current local time of day, in the local zone."""
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    year, month, date = (int(n) for n in day.split("-"))
    moment = datetime(year, month, date, local.hour, local.minute, local.second, tzinfo=ZoneInfo(zone))
    return int(moment.timestamp())


# Two opposite corners by default (early in UTC, late in Los Angeles: the day
# differs between the zones); all four under --full.
READINGS = [(now, zone) for now in NOWS for zone in ZONES]
if not budget(True, False):
    READINGS = [("early", "UTC"), ("late", "America/Los_Angeles")]


@pytest.mark.parametrize(("now", "zone"), READINGS, ids=[f"{now}-{zone}" for now, zone in READINGS])
def test_the_audit_guide_shows_real_output(tmp_path: Path, now: str, zone: str) -> None:
    faked = {"GIT_TEST_DATE_NOW": str(int(at(NOWS[now]))), "TZ": zone}
    # the faked clock and zone reach git: it reads a bare date as this run's time of day and zone
    probe = tmp_path / "probe.git"
    subprocess.run(["git", "init", "-q", "--bare", str(probe)], check=True)
    env = {**os.environ, **faked}
    read = subprocess.run(
        ["git", "-C", str(probe), "rev-parse", "--since=2026-11-04"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert read.strip() == f"--max-age={git_reads_a_bare_date_as('2026-11-04', at(NOWS[now]), zone)}"
    problems = check_guide(DOCS / "audit.md", tmp_path, faked)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("zone", ZONES)
def test_vaultmem_reads_a_time_without_a_zone_as_utc_in_every_zone(tmp_path: Path, zone: str) -> None:
    """Unlike git, vaultmem's ``--since``/``--until`` do not move with the local
    zone: a time without a zone is UTC, and a date alone is that whole day in
    UTC (never the current time of day)."""
    key = generate_key()
    build_example(tmp_path / "support.vault", key)
    env = doc_environment(tmp_path, key, {"TZ": zone})

    def log(*args: str) -> str:
        command = [sys.executable, "-m", "vaultmem", "log", "--actor", "support-bot", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout

    zoned = log("--since", "2026-11-04T00:00:00Z", "--until", "2026-11-04T23:59:59Z")
    assert [line.split()[1] for line in zoned.splitlines()] == [
        "2026-11-04T16:21:10Z",
        "2026-11-04T16:20:40Z",
        "2026-11-04T16:20:05Z",
        "2026-11-04T14:30:00Z",
    ]
    assert log("--since", "2026-11-04", "--until", "2026-11-04 23:59:59") == zoned
    assert log("--since", "2026-11-04", "--until", "2026-11-04") == zoned  # a date alone: the whole day
    assert log("--since", "2026-11-04 00:00", "--until", "2026-11-05 00:00") == zoned
    assert log("--since", "2026-11-04T14:30:00", "--until", "2026-11-04 16:21:10") == zoned


def test_the_audit_guide_covers_each_task() -> None:
    text = (DOCS / "audit.md").read_text(encoding="utf-8")
    commands = [step.command for step in console_steps(text)]
    for needle in (
        "vaultmem log /memories/",
        "vaultmem show ",
        "--at ",
        "vaultmem log --session ",
        "vaultmem verify",
        "vaultmem restore ",
        "vaultmem undo",
        "vaultmem key rotate",
        "vaultmem key change",
        "vaultmem git-setup",
        "%(trailers",
        "log -p",
    ):
        assert any(needle in command for command in commands), needle


def test_a_drifted_guide_fails(tmp_path: Path) -> None:
    """The check can fail: a changed word, a changed id, an extra line."""
    good = "```console\n$ vaultmem log --session sess-0101\n{}\n```\n"
    first = "0123456789  2026-11-02T09:16:30Z  support-bot  sess-0101  create  /memories/policies/refunds.md"
    second = "abcdef0123  2026-11-02T09:14:00Z  support-bot  sess-0101  create  /memories/customers/acme.md"
    doc = tmp_path / "guide.md"
    doc.write_text(good.format(f"{first}\n{second}"))
    assert check_guide(doc, tmp_path / "ok") == []
    for n, bad in enumerate(
        (
            f"{first}\n{second.replace('acme', 'globex')}",
            f"{first}\n{second.replace('abcdef0123', '0123456789')}",  # two versions cannot share an id
            f"{first}\n{second}\nand one more line",
        )
    ):
        doc.write_text(good.format(bad))
        assert check_guide(doc, tmp_path / f"bad{n}") != []


# -- docs/cli.md -----------------------------------------------------------------------------


def _options(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, str]]:
    """(command, option) for every option and subcommand of the parser."""
    found: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix}{name}".strip(), ""))
                found += _options(sub, f"{prefix}{name} ")
        else:
            found += [(prefix.strip(), option) for option in action.option_strings if option != "-h"]
    return found


def test_the_cli_reference_names_every_command_option_variable_and_exit_code() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for command, option in _options(build_parser()):
        if option == "":
            assert re.search(rf"^#+ `?vaultmem {re.escape(command)}\b", text, re.M), f"no section for {command}"
        else:
            assert f"`{option}" in text, f"{command} {option} is not documented"
    for variable in (
        "VAULTMEM_VAULT",
        "VAULTMEM_KEY",
        "VAULTMEM_PASSPHRASE",
        "VAULTMEM_NEW_KEY",
        "VAULTMEM_NEW_PASSPHRASE",
    ):
        assert f"`{variable}`" in text, variable
    for code in ("0", "1", "2"):
        assert re.search(rf"^\| `?{code}`? \|", text, re.M), f"exit code {code}"
