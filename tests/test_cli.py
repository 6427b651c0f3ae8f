"""The `vaultmem` command, run as a real subprocess against real vaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import commit_count, git

from vaultmem import Vault, generate_key


def run(*args: str, key: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    if key is not None:
        env["VAULTMEM_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )


def test_keygen_prints_a_key_that_opens_a_new_vault(tmp_path: Path) -> None:
    result = run("keygen")
    assert result.returncode == 0
    key = result.stdout.strip()
    Vault.init(tmp_path / "v", key=key)
    Vault.open(tmp_path / "v", key=key)


def test_init_then_call_records_one_commit_per_mutation(tmp_path: Path) -> None:
    key = generate_key()
    vault = str(tmp_path / "agent.vault")
    assert run("--vault", vault, "init", key=key).returncode == 0
    create = {"command": "create", "path": "/memories/hello.txt", "file_text": "hi\n"}
    result = run("--vault", vault, "call", json.dumps(create), "--actor", "ops", "--session", "s-1", key=key)
    assert result.returncode == 0
    assert result.stdout == "File created successfully at: /memories/hello.txt\n"
    view = run("--vault", vault, "call", '{"command": "view", "path": "/memories/hello.txt"}', key=key)
    assert view.stdout == "Here's the content of /memories/hello.txt with line numbers:\n     1\thi\n"
    assert commit_count(Path(vault)) == 1
    assert git(Path(vault), "log", "-1", "--format=%an|%(trailers:key=Vaultmem-Session,valueonly)").strip() == "ops|s-1"


def test_a_refused_call_prints_the_tool_message_and_exits_1(tmp_path: Path) -> None:
    key = generate_key()
    vault = str(tmp_path / "v")
    run("--vault", vault, "init", key=key)
    result = run("--vault", vault, "call", '{"command": "view", "path": "/memories/nope"}', key=key)
    assert result.returncode == 1
    assert result.stdout == "The path /memories/nope does not exist. Please provide a valid path.\n"


def test_wrong_key_exits_2_with_one_clear_message(tmp_path: Path) -> None:
    vault = str(tmp_path / "v")
    run("--vault", vault, "init", key=generate_key())
    result = run("--vault", vault, "call", '{"command": "view", "path": "/memories"}', key=generate_key())
    assert result.returncode == 2
    assert "does not open this vault" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("call", "{}"), "no vault given"),
        (("--vault", "VAULT", "call", "not json"), "not valid JSON"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    key = generate_key()
    vault = str(tmp_path / "v")
    run("--vault", vault, "init", key=key)
    result = run(*(vault if a == "VAULT" else a for a in args), key=key)
    assert result.returncode == 2
    assert message in result.stderr


def test_init_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "file").write_text("x")
    result = run("--vault", str(tmp_path / "occupied"), "init", key=generate_key())
    assert result.returncode == 2
    assert "not an empty folder" in result.stderr


def test_key_file_must_be_private(tmp_path: Path) -> None:
    key_file = tmp_path / "vault.key"
    key_file.write_text(generate_key())
    key_file.chmod(0o644)
    result = run("--vault", str(tmp_path / "v"), "--key-file", str(key_file), "init")
    assert result.returncode == 2
    assert "chmod 600" in result.stderr
    key_file.chmod(0o600)
    assert run("--vault", str(tmp_path / "v"), "--key-file", str(key_file), "init").returncode == 0


def test_global_options_work_after_the_command_too(tmp_path: Path) -> None:
    """`vaultmem ls --vault X`, as git and gh take their options anywhere."""
    key = generate_key()
    vault = str(tmp_path / "agent.vault")
    assert run("init", "--vault", vault, key=key).returncode == 0
    create = {"command": "create", "path": "/memories/a.txt", "file_text": "a\n"}
    assert run("call", json.dumps(create), "--vault", vault, key=key).returncode == 0
    listed = run("ls", "--vault", vault, key=key)
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    assert "/memories/a.txt" in listed.stdout
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    by_file = run("cat", "/memories/a.txt", "--key-file", str(key_file), "--vault", vault)
    assert (by_file.returncode, by_file.stdout) == (0, "a\n"), by_file.stderr
    # After the command wins over before it, as the later option does in git.
    other = str(tmp_path / "other.vault")
    assert run("--vault", other, "cat", "/memories/a.txt", "--vault", vault, key=key).stdout == "a\n"


NOT_UTF8 = "\udce9"  # what Python makes of the byte 0xE9 (a Latin-1 "é") on a command line


@pytest.mark.parametrize(
    "args",
    [
        ("call", "--actor", f"ren{NOT_UTF8}", '{"command": "create", "path": "/memories/b.txt", "file_text": "x"}'),
        ("call", "--session", f"s{NOT_UTF8}", '{"command": "create", "path": "/memories/b.txt", "file_text": "x"}'),
        ("forget", "/memories/a.txt", "--reason", f"demande de Ren{NOT_UTF8}"),
        ("forget", "/memories/a.txt", "--reason", "GDPR request 4411", "--actor", f"ren{NOT_UTF8}"),
        ("forget", "--matching", "hello", "--reason", "GDPR request 4411", "--session", f"s{NOT_UTF8}"),
        ("redact", "main", "/memories/a.txt", "--reason", f"demande de Ren{NOT_UTF8}"),
        ("restore", "main~1", "--actor", f"ren{NOT_UTF8}"),
        ("retention", "--keep-for", "1d", "--actor", f"ren{NOT_UTF8}"),
    ],
)
def test_text_that_is_not_utf8_in_a_label_or_a_reason_is_one_clear_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    key = generate_key()
    vault = tmp_path / "v"
    run("--vault", str(vault), "init", key=key)
    for text in ("hello\n", "hello again\n"):
        create = {"command": "create" if text == "hello\n" else "str_replace", "path": "/memories/a.txt"}
        create.update({"file_text": text} if text == "hello\n" else {"old_str": "hello", "new_str": "hello again"})
        assert run("--vault", str(vault), "call", json.dumps(create), key=key).returncode == 0
    before = git(vault, "for-each-ref")
    result = run("--vault", str(vault), *args, key=key)
    message = result.stdout if args[0] == "call" else result.stderr
    assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "not valid Unicode" in message, (result.stdout, result.stderr)
    assert result.returncode == (1 if args[0] == "call" else 2)  # call: the tool refuses, as for any bad actor
    assert git(vault, "for-each-ref") == before  # nothing changed


def test_input_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    key = generate_key()
    vault = tmp_path / "v"
    run("--vault", str(vault), "init", key=key)
    create = {"command": "create", "path": "/memories/a.txt", "file_text": "b\n"}
    assert run("--vault", str(vault), "call", json.dumps(create), key=key).returncode == 0
    before = git(vault, "for-each-ref")
    deep_regex = "(" * 2000 + "b" + ")" * 2000
    for args, says in [
        (("call", "[" * 5000 + "]" * 5000), "nested too deeply"),
        (("call", '{"command": "view", "path": ' + "[" * 5000 + "]" * 5000 + "}"), "nested too deeply"),
        (("find", "--regex", deep_regex), "nest too deeply"),
        (("forget", "--matching", deep_regex, "--regex", "--dry-run"), "nest too deeply"),
        (("policy", "set", "patterns=" + json.dumps({"k": deep_regex}), "--actor", "ops"), "nest too deeply"),
        (("policy", "set", "patterns=" + "[" * 5000 + "]" * 5000, "--actor", "ops"), "nested too deeply"),
    ]:
        result = run("--vault", str(vault), *args, key=key)
        assert result.returncode == 2, (args[0], result.stderr)
        assert result.stderr.startswith("vaultmem: ") and result.stderr.count("\n") == 1, result.stderr
        assert says in result.stderr and "unexpected" not in result.stderr, result.stderr
    assert git(vault, "for-each-ref") == before
