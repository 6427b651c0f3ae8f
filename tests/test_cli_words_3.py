"""The command line's words and durations: `policy set` durations need a
unit, `log` of a path the vault never held says so, counts and durations
read as English, and help and refusals say what is true.

Every command runs in-process through ``vaultmem.cli.app.main`` on a real
vault (real git, real Fernet), with VAULTMEM_KEY set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FakeClock, git

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main
from vaultmem.core.policy import Policy
from vaultmem.repo.policy import POLICY_REF

PAST = 1_700_000_000.0  # 2023: every file written then is long unused by the real clock


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Setup:
    path: Path
    key: str
    home: Path

    def open(self, clock: FakeClock | None = None) -> Vault:
        return Vault.open(self.path, key=self.key, clock=clock or FakeClock(PAST))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A vault whose /memories/a.txt was written (and last used) in 2023."""
    key = generate_key()
    path = tmp_path / "agent.vault"
    with Vault.init(path, key=key, clock=FakeClock(PAST)) as vault:
        VaultMemoryTool(vault, actor="bot").call(
            {"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"}
        )
    yield Setup(path, key, tmp_path)


@pytest.fixture
def cli(setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", setup.key)
    monkeypatch.chdir(setup.home)

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            code = main(["--vault", str(setup.path), *args])
        except SystemExit as stop:  # --help
            code = int(stop.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def one_error(result: Result) -> str:
    assert result.code == 2, result
    assert result.out == ""
    assert result.err.startswith("vaultmem: ") and result.err.count("\n") == 1, result.err
    return result.err[len("vaultmem: ") : -1]


def policy_commits(path: Path) -> int:
    out = git(path, "rev-list", "--count", POLICY_REF, check=False).strip()
    return int(out) if out else 0


# -- policy set: a duration needs a unit ----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "meant"),
    [
        ("content_retention=365", "content_retention=365d"),
        ("expire_after=30", "expire_after=30d"),
        ("sync_every= 60 ", "sync_every=60d"),
        ("expire_after=٣٠", "expire_after=٣٠d"),  # digits of another script are digits too
    ],
)
def test_policy_set_refuses_a_duration_with_no_unit(
    cli: Callable[..., Result], setup: Setup, change: str, meant: str
) -> None:
    """`content_retention=365` was read as 365 seconds: every version older
    than six minutes would be erased at the next write."""
    message = one_error(cli("policy", "set", "max_files=7", change))
    field = change.partition("=")[0]
    assert message.startswith(f"{change.replace(' ', '')} has no unit: write {meant} for days (or ")
    assert message.endswith("). Nothing was changed.")
    assert field in message
    assert policy_commits(setup.path) == 0
    assert setup.open().policy == Policy()


@pytest.mark.parametrize("value", ["0", "00", "0d", "0s", "-5", "-30"])
def test_policy_set_refuses_a_zero_or_negative_duration_naming_the_field_and_off(
    cli: Callable[..., Result], setup: Setup, value: str
) -> None:
    """A zero retention would keep no old version at all: refused, and the
    way to turn the field off is named instead."""
    message = one_error(cli("policy", "set", f"content_retention={value}"))
    assert message == (
        f"content_retention={value} is not a duration of at least 1: write one with a unit, such as "
        "content_retention=365d, or content_retention=off for none. Nothing was changed."
    )
    assert policy_commits(setup.path) == 0


def test_a_duration_with_a_unit_is_taken_and_the_python_api_keeps_seconds(
    cli: Callable[..., Result], setup: Setup
) -> None:
    result = cli("policy", "set", "content_retention=365d", "sync_every=60s", "expire_after=2w")
    assert (result.code, result.err) == (0, "")
    assert result.out == "expire_after: null -> 2w\nsync_every: null -> 1m\ncontent_retention: null -> 365d\n"
    with setup.open() as vault:
        assert vault.policy.content_retention == 365 * 86_400
        new = vault.set_policy(actor="ops", content_retention=3600)  # the library: a number is seconds
    assert new.content_retention == 3600
    assert cli("policy", "set", "content_retention=off").out == "content_retention: 1h -> null\n"


@pytest.mark.parametrize(
    ("command", "option", "example"), [("expire", "--unread-for", "30d"), ("retention", "--keep-for", "365d")]
)
def test_an_age_of_other_digits_or_below_one_is_refused_in_words_that_work(
    cli: Callable[..., Result], setup: Setup, command: str, option: str, example: str
) -> None:
    """`--keep-for ٣٦٥` was read as 365 seconds (the check for a unit took
    only ASCII digits), and `--unread-for 0` was told to write `0d`."""
    before = [v.id for v in setup.open().history()]
    message = one_error(cli(command, option, "٣٦٥"))
    assert message == f"{option} ٣٦٥ has no unit: write ٣٦٥d for days (or ٣٦٥s, ٣٦٥m, ٣٦٥h, ٣٦٥w). Nothing was changed."
    for age in ("0", "0d", "-5", "-5d"):
        message = one_error(cli(command, f"{option}={age}"))
        assert message == (
            f"{option} {age} is not a duration of at least 1: write one with a unit, such as {option} {example}. "
            "Nothing was changed."
        )
    assert [v.id for v in setup.open().history()] == before


def test_a_bare_number_too_long_as_seconds_is_still_called_too_long(cli: Callable[..., Result]) -> None:
    """Longer than 100 years whatever its unit: that is what is said."""
    message = one_error(cli("policy", "set", "expire_after=99999999999"))
    assert message == "'99999999999' is longer than 100 years (36500d); write a shorter duration."


def test_policy_set_notes_a_sync_remote_this_clone_lacks(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli("policy", "set", "sync_remote=backup")
    assert (result.code, result.out) == (0, 'sync_remote: null -> "backup"\n')
    assert result.err == (
        "Note: this clone has no remote named 'backup', so its memory tools work locally; add it with "
        "`vaultmem remote add backup URL`.\n"
    )
    assert setup.open().policy.sync_remote == "backup"  # the policy is every clone's: stored all the same
    (setup.home / "server.git").mkdir()
    git(setup.home / "server.git", "init", "-q", "--bare")
    assert cli("remote", "add", "origin", str(setup.home / "server.git")).code == 0
    result = cli("policy", "set", "sync_remote=origin")
    assert (result.code, result.out, result.err) == (0, 'sync_remote: "backup" -> "origin"\n', "")


# -- log of a path the vault never held ------------------------------------------------------


def test_log_of_a_path_the_vault_never_held_says_so(cli: Callable[..., Result]) -> None:
    """`vaultmem log /memories/typo` printed nothing and exited 0, as if the
    file existed and had no changes."""
    for args in (("log", "/memories/typo"), ("log", "/memories/typo", "--json"), ("log", "/memories/no/such/dir")):
        message = one_error(cli(*args))
        assert message == f"the vault has no versions of {args[1]}: no file or folder there was ever written."


def test_log_of_a_path_the_vault_held_lists_or_prints_nothing_when_filtered(
    cli: Callable[..., Result], setup: Setup
) -> None:
    with setup.open() as vault:
        VaultMemoryTool(vault, actor="bot").call({"command": "delete", "path": "/memories/a.txt"})
    result = cli("log", "/memories/a.txt")
    assert result.code == 0 and result.err == ""
    assert [line.split()[-2:] for line in result.out.splitlines()] == [
        ["delete", "/memories/a.txt"],
        ["create", "/memories/a.txt"],
    ]
    filtered = cli("log", "/memories/a.txt", "--actor", "nobody")
    assert (filtered.code, filtered.out, filtered.err) == (0, "", "")
    assert cli("log", "/memories/a.txt", "--actor", "nobody", "--json").out == "[]\n"


def test_diff_of_a_path_the_vault_never_held_says_so(cli: Callable[..., Result]) -> None:
    """`vaultmem diff main~0 main --path /memories/typo` printed nothing and
    exited 0, as for a file that did not change."""
    for args in (("diff", "main", "main"), ("diff", "main"), ("diff", "main", "--json")):
        message = one_error(cli(*args, "--path", "/memories/typo"))
        assert message == "the vault has no versions of /memories/typo: no file or folder there was ever written."
    unchanged = cli("diff", "main", "main", "--path", "/memories/a.txt")
    assert (unchanged.code, unchanged.out, unchanged.err) == (0, "", "")


# -- durations and counts in words ------------------------------------------------------------


def test_expire_says_its_age_in_words(cli: Callable[..., Result], setup: Setup) -> None:
    result = cli("expire", "--unread-for", "1d", "--dry-run")
    assert result.code == 0
    assert result.out.splitlines()[-1] == "Would delete 1 file unused for 1 day or more (dry run: nothing changed)."
    with setup.open(FakeClock(PAST + 10**9)) as vault:  # 2055: long after the real clock
        VaultMemoryTool(vault, actor="bot").call({"command": "view", "path": "/memories/a.txt"})
    for age, words in (
        ("1d", "1 day"),
        ("2w", "2 weeks"),
        ("12h", "12 hours"),
        ("1m", "1 minute"),
        ("90s", "90 seconds"),
    ):
        result = cli("expire", "--unread-for", age, "--dry-run")
        assert result.out == f"Nothing to expire: every file was read or written in the last {words}.\n"


def test_import_clashes_and_left_out_folders_are_counted_in_english(cli: Callable[..., Result], setup: Setup) -> None:
    source = setup.home / "plain"
    (source / "memories" / "empty").mkdir(parents=True)
    (source / "memories" / "a.txt").write_text("other\n")
    message = one_error(cli("import", str(source)))
    assert message.startswith("cannot import: 1 path already exists in the vault (/memories/a.txt). ")
    (source / "memories" / "a.txt").unlink()
    (source / "memories" / "b.txt").write_text("bravo\n")
    (source / "memories" / "c.txt").write_text("charlie\n")
    assert cli("import", str(source)).out.splitlines()[-1] == (
        "Left out 1 empty folder: git records files, not empty folders."
    )
    message = one_error(cli("import", str(source)))
    assert message.startswith("cannot import: 2 paths already exist in the vault (/memories/b.txt, /memories/c.txt). ")


def test_import_and_export_of_one_byte_say_one_byte(cli: Callable[..., Result], setup: Setup) -> None:
    source = setup.home / "one" / "memories"
    source.mkdir(parents=True)
    (source / "x.txt").write_text("x")
    with setup.open() as vault:
        VaultMemoryTool(vault, actor="bot").call({"command": "delete", "path": "/memories/a.txt"})
    result = cli("import", str(source.parent))
    assert result.code == 0 and result.out.startswith(f"Imported 1 file (1 byte) from {source} as version ")
    result = cli("export", str(setup.home / "out"))
    assert result.code == 0 and result.out.startswith("Exported 1 file (1 byte) of version ")


def test_erasure_notes_are_counted_in_english(cli: Callable[..., Result]) -> None:
    result = cli("forget", "/memories/a.txt", "--reason", "request 7", "--dry-run")
    assert result.code == 0
    notes = [line for line in result.out.splitlines() if line.startswith("Note: ")]
    assert "Note: 1 current file holds erased content and leaves the memory in the same commit." in notes
    assert all("(s)" not in note for note in notes), notes


def test_verify_of_one_version_counts_in_the_singular(cli: Callable[..., Result]) -> None:
    result = cli("verify")
    assert (result.code, result.err) == (0, "")
    assert result.out == "Checked 1 version, 1 file version and 2 trees: no problems found.\n"


def test_an_unknown_policy_field_is_named_in_english(cli: Callable[..., Result]) -> None:
    assert one_error(cli("policy", "set", "colour=red")) == "unknown policy field: colour."
    assert one_error(cli("policy", "set", "colour=red", "size=1")) == "unknown policy fields: colour, size."


def test_revoking_several_keys_at_once_says_how_many(cli: Callable[..., Result], setup: Setup) -> None:
    """`signer revoke bot` revokes every key bot has; after a rotation that is
    two, and "Revoked bot's key" named one."""
    keys = {name: SigningKey.generate() for name in ("ops", "bot", "bot2")}
    keys["ops"].save(setup.home / "ops.key", comment="ops")
    clock = FakeClock(PAST)
    with setup.open(clock) as vault:
        vault.sign_as("ops", keys["ops"])
        vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
        vault.add_signer("bot", keys["bot"].public, actor="ops")
        clock.advance(60)
        vault.rotate_signer("bot", keys["bot2"].public, actor="ops")
    result = cli("signer", "revoke", "bot", "--actor", "ops", "--signing-key", "ops.key")
    assert (result.code, result.err) == (0, "")
    assert result.out == "Revoked bot's 2 keys: signatures they make from now on do not count.\n"
    result = cli("signer", "revoke", "bot", "--compromised", "--actor", "ops", "--signing-key", "ops.key")
    assert result.out == "Revoked bot's 2 keys as compromised: no signature they ever made counts.\n"


def test_rotating_and_revoking_one_key_say_its_key(cli: Callable[..., Result], setup: Setup) -> None:
    keys = {name: SigningKey.generate() for name in ("ops", "bot")}
    keys["ops"].save(setup.home / "ops.key", comment="ops")
    with setup.open() as vault:
        vault.sign_as("ops", keys["ops"])
        vault.add_signer("ops", keys["ops"].public, actor="ops", operator=True)
        vault.add_signer("bot", keys["bot"].public, actor="ops")
    new = SigningKey.generate()
    new.save(setup.home / "bot2.key", comment="bot")
    result = cli("signer", "rotate", "bot", "bot2.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    assert (result.code, result.err) == (0, "")
    assert result.out == f"bot signs with {new.public.fingerprint} from now on; its older key stopped now.\n"
    result = cli("signer", "revoke", "bot", "--key", "bot2.key.pub", "--actor", "ops", "--signing-key", "ops.key")
    assert result.out == "Revoked bot's key: signatures it makes from now on do not count.\n"


# -- init and mcp say what is true ------------------------------------------------------------


def test_init_on_a_vault_says_it_is_a_vault_already(cli: Callable[..., Result], setup: Setup) -> None:
    message = one_error(cli("init"))
    assert message == (
        f"{setup.path} is a vault already (it exists and is not an empty folder); choose a new folder for a new vault."
    )
    other = setup.home / "notes"
    other.mkdir()
    (other / "x.txt").write_text("x\n")
    message = one_error(cli("--vault", str(other), "init"))
    assert message == f"{other} exists and is not an empty folder; choose a new folder for the vault."


@pytest.mark.parametrize("size", ["0", "-5"])
def test_mcp_names_its_option_when_the_request_size_is_too_small(cli: Callable[..., Result], size: str) -> None:
    assert one_error(cli("mcp", "--max-request-bytes", size)) == f"--max-request-bytes must be at least 1 (got {size})."


def test_mcp_help_promises_no_passphrase_from_a_pipe(cli: Callable[..., Result]) -> None:
    """`vaultmem mcp` speaks MCP on standard input and refuses to read a
    passphrase there; its --help said "or one line of a pipe"."""
    result = cli("mcp", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    said = text[text.index("--passphrase use a passphrase") :].split(" --passphrase-file")[0]
    assert "pipe" not in said
    assert said == (
        "--passphrase use a passphrase: from VAULTMEM_PASSPHRASE, else asked for at a terminal (never read "
        "from standard input, where MCP speaks)"
    )
    other = " ".join(cli("ls", "--help").out.split())
    assert "or one line of a pipe" in other
