"""Every code block of the README and docs/ runs as printed (issue 15).

Each fenced block says what it is.  ``console`` blocks are terminal sessions:
each ``$`` command runs in one bash session and prints what the lines under it
show (docs/audit.md by test_audit_doc.py, the others here; version ids, times
and keys are the parts that differ from run to run).  ``python`` and ``sh``
blocks run unchanged in a fresh folder, in a fresh process, with this
checkout's ``vaultmem`` on PATH and Claude's side played by a local replay
server (``ANTHROPIC_BASE_URL``, the SDK's own setting).  ``text`` blocks are
output or layouts, and ``json`` ones data, checked where they can be.

The one change made to a block: ``pip install ...`` is left out of ``sh``
blocks, since the tests run where vaultmem is installed (``.ci/run`` installs
it exactly so).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_audit_doc import Ids, Step, _run_with_ids, console_steps

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.testing.replay import ReplayServer, reply, text

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.M | re.S)
LANGUAGES = {"console", "python", "sh", "text", "json"}
PASSPHRASE = "correct horse battery staple"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def all_blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text_ = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text_):
            line = text_[: match.start()].count("\n") + 1
            found.append(Block(str(doc.relative_to(ROOT)), line, match.group(1), match.group(2)))
    return found


BLOCKS = all_blocks()


def of(language: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language]


def test_every_block_says_what_it_is() -> None:
    unnamed = [f"{b} ```{b.language}" for b in BLOCKS if b.language not in LANGUAGES]
    assert not unnamed, "blocks without a known language: " + ", ".join(unnamed)
    assert len(of("python")) >= 6 and len(of("sh")) >= 5 and len(of("console")) >= 25


# -- the folder a reader starts in ----------------------------------------------------------


def environment(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """A clean environment whose `vaultmem` is this checkout's, plus ``extra``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "vaultmem"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vaultmem "$@"\n')
    wrapper.chmod(0o755)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    return {
        **keep,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def prepare(block: Block, work: Path) -> dict[str, str]:
    """The folder a reader of this block is in: what the doc has them make
    before it.  Returns the variables they have set."""
    code = block.code
    if 'Vault.init("agent.vault"' in code or "agent.vault init" in code or "vaultmem demo" in code:
        return {}  # the block makes its own vault
    if block.doc == "docs/sync.md":  # a server holding the laptop's vault
        key = generate_key()
        subprocess.run(["git", "init", "-q", "--bare", str(work / "server.git")], check=True)
        with Vault.init(work / "laptop.vault", key=key) as laptop:
            VaultMemoryTool(laptop, actor="cli").call(
                {"command": "create", "path": "/memories/notes.txt", "file_text": "Prefers e-mail.\n"}
            )
            cwd = os.getcwd()
            os.chdir(work)  # the remote's URL is relative, as the page gives it (stored absolute)
            try:
                laptop.add_remote("origin", "./server.git")
                laptop.push()
            finally:
                os.chdir(cwd)
        return {"VAULTMEM_KEY": key}
    if "AGENT_PASSPHRASE" in code:  # docs/cli.md: a vault made with a passphrase
        Vault.init(work / "agent.vault", passphrase=PASSPHRASE).close()
        return {"AGENT_PASSPHRASE": PASSPHRASE}
    key = generate_key()
    with Vault.init(work / "agent.vault", key=key) as vault:  # getting-started.md's vault
        tool = VaultMemoryTool(vault, actor="cli", session="sess-42")
        tool.call({"command": "create", "path": "/memories/preferences.txt", "file_text": "Favorite color: blue\n"})
        tool.call(
            {"command": "str_replace", "path": "/memories/preferences.txt", "old_str": "blue", "new_str": "green"}
        )
    return {"VAULTMEM_KEY": key}


CLAUDE = [reply(text("Noted: e-mail only from now on."))]  # what Claude answers each block's one request


# -- python -------------------------------------------------------------------------------


def run_by_test_agent_docs(block: Block) -> bool:
    """The agent integration and the replay example: test_agent_docs.py runs
    those blocks as printed and checks what they did in the vault."""
    return block.doc in ("README.md", "docs/agent.md") and (
        ("tool_runner(**request)" in block.code and "Vault.open" in block.code and "Replay" not in block.code)
        or "ReplayServer(turns)" in block.code
    )


def test_the_blocks_left_to_test_agent_docs_are_the_ones_it_runs() -> None:
    left = [str(b) for b in of("python") if run_by_test_agent_docs(b)]
    assert len(left) == 3, left  # the integration in README.md and agent.md, agent.md's replay example


@pytest.mark.parametrize("block", [b for b in of("python") if not run_by_test_agent_docs(b)], ids=str)
def test_every_python_block_runs_as_printed(block: Block, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    variables = prepare(block, work)
    with ReplayServer(CLAUDE * 3) as server:
        env = environment(tmp_path, {**variables, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"})
        result = subprocess.run(
            [sys.executable, "-c", block.code],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        refused = [r.refused for r in server.requests if r.refused]
    assert result.returncode == 0, f"{block}:\n{result.stderr}"
    assert not refused, f"{block}: the API would refuse the request: {refused}"


# -- sh -----------------------------------------------------------------------------------


def without_installs(code: str) -> str:
    """The block with its ``pip install ...`` left out (see the module docstring)."""
    lines = []
    for line in code.splitlines():
        if line.startswith("pip install "):
            line = line.split("&&", 1)[1].strip() if "&&" in line else ""
        if line:
            lines.append(line)
    return "\n".join(lines) + "\n"


def distinct(blocks: list[Block]) -> list[Block]:
    """One of each block that runs the same commands (the README and
    getting-started.md both show `vaultmem demo`)."""
    seen: dict[str, Block] = {}
    for block in blocks:
        commands = re.sub(r"\s+#.*", "", without_installs(block.code)).strip()
        seen.setdefault(commands, block)
    return list(seen.values())


def check_update_hook(code: str, work: Path) -> None:
    """The update hook refuses deletions and forced updates, but of the keyring."""
    repo = work / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    hook = repo / "hooks" / "update"
    hook.write_text(code)
    hook.chmod(0o755)

    def commit(*parents: str) -> str:
        tree = subprocess.run(
            ["git", "-C", str(repo), "mktree"], input="", capture_output=True, text=True, check=True
        ).stdout.strip()
        args = [arg for parent in parents for arg in ("-p", parent)]
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
        env["GIT_COMMITTER_EMAIL"] = "t@t"
        return subprocess.run(
            ["git", "-C", str(repo), "commit-tree", tree, *args, "-m", "x"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()

    zero = "0" * 40
    a = commit()
    b = commit(a)
    other = commit()  # a new root, as an erasure makes the keyring

    def runs(ref: str, old: str, new: str) -> int:
        return subprocess.run([str(hook), ref, old, new], cwd=repo, capture_output=True).returncode

    assert runs("refs/heads/main", zero, a) == 0  # created
    assert runs("refs/heads/main", a, b) == 0  # a fast-forward
    assert runs("refs/heads/main", b, other) != 0  # forced
    assert runs("refs/heads/main", b, zero) != 0  # deleted
    assert runs("refs/heads/vaultmem-keyring", b, other) == 0  # an erasure's keyring
    assert runs("refs/heads/vaultmem-keyring", b, zero) != 0


@pytest.mark.parametrize("block", distinct(of("sh")), ids=str)
def test_every_sh_block_runs_as_printed(block: Block, tmp_path: Path) -> None:
    code = without_installs(block.code)
    if "python -m pytest" in code:  # the README's test command: `.ci/run` runs exactly it
        ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
        assert "pip install --quiet --disable-pip-version-check -e '.[test]'" in ci
        assert ci.rstrip().endswith("python3 -m pytest -q")
        assert code.strip() == "python -m pytest"
        return
    work = tmp_path / "work"
    work.mkdir()
    if code.startswith("#!/bin/sh\n# hooks/update"):  # docs/sync.md: a hook, run as git runs it
        check_update_hook(code, work)
        return
    variables = prepare(block, work)
    with ReplayServer(CLAUDE * 3) as server:
        env = environment(tmp_path, {**variables, "ANTHROPIC_BASE_URL": server.url})
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", code],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,  # `vaultmem chat` ends at the end of its input
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert result.returncode == 0, f"{block}:\n{code}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


# -- console ------------------------------------------------------------------------------


class Loose(Ids):
    """Matches a shown line with its version ids, times, days, keys and sealed
    names' tokens as wildcards (they differ from run to run); nothing is
    typed back in these docs."""

    def match(self, expected: str, actual: str) -> bool:
        pattern = ""
        for part in re.split(r"(\b[0-9a-f]{7,}\b|\bn[a-z2-7]{16}\b|\d{4}-\d\d-\d\d(?:T\d\d:\d\d:\d\dZ)?)", expected):
            if re.fullmatch(r"[0-9a-f]{7,}", part):
                pattern += f"[0-9a-f]{{{len(part)}}}"
            elif re.fullmatch(r"n[a-z2-7]{16}", part):  # a sealed name's token: keyed, so it differs too
                pattern += r"n[a-z2-7]{16}"
            elif re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", part):
                pattern += r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
            elif re.fullmatch(r"\d{4}-\d\d-\d\d", part):  # a day: the day the example runs
                pattern += r"\d{4}-\d\d-\d\d"
            else:
                pattern += re.escape(part)
        return re.fullmatch(pattern, actual) is not None

    def substitute(self, command: str) -> str:
        return command


CONSOLE_DOCS = sorted({b.doc for b in of("console")} - {"docs/audit.md"})  # audit.md: test_audit_doc.py


@pytest.mark.parametrize("doc", CONSOLE_DOCS)
def test_every_console_session_shows_real_output(doc: str, tmp_path: Path) -> None:
    text_ = (ROOT / doc).read_text(encoding="utf-8")
    steps: list[Step] = console_steps(text_)
    work = tmp_path / "work"
    work.mkdir()
    first = Block(doc, 0, "console", "\n".join(s.command for s in steps))
    variables = prepare(first, work) if "vaultmem keygen" not in first.code else {}
    outputs = _run_with_ids(steps, Loose(), work, environment(tmp_path, variables))
    problems = []
    for step, actual in zip(steps, outputs, strict=True):
        expected = [line.rstrip() for line in step.expected]
        got = [line.rstrip() for line in actual]
        if len(expected) != len(got) or not all(Loose().match(e, g) for e, g in zip(expected, got, strict=True)):
            problems.append(
                f"{doc}:{step.line}: $ {step.command}\n--- shown\n"
                + "\n".join(expected)
                + "\n--- got\n"
                + "\n".join(got)
            )
    assert not problems, "\n\n".join(problems)


# -- data ---------------------------------------------------------------------------------


def test_the_keyring_shown_in_docs_format_has_a_real_keyrings_fields(tmp_path: Path) -> None:
    [shown] = [b for b in of("json") if b.doc == "docs/format.md"]
    example = json.loads(shown.code)
    Vault.init(tmp_path / "v", key=generate_key()).close()
    real = json.loads(
        subprocess.run(
            ["git", "-C", str(tmp_path / "v"), "cat-file", "blob", "refs/heads/vaultmem-keyring:keyring.json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    assert set(example) == set(real)
    assert set(example["epochs"][0]) == set(real["epochs"][0])
    assert example["vaultmem_format"] == real["vaultmem_format"]
