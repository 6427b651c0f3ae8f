"""Actor and session names are recorded three ways (git's author, the
trailers, what ``history`` reads back); a name that begins or ends with
white space would read differently in each (git trims the author's name),
so an auditor's ``git log --author`` and ``vaultmem log --actor`` would
disagree.  Such a name is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import commit_count

from vaultmem import Change, Vault, VaultMemoryTool, generate_key
from vaultmem.errors import VaultError


@pytest.mark.parametrize(
    ("actor", "session"),
    [(" spaced ", None), ("bot ", None), ("\u00a0bot", None), ("bot", " ticket-1"), ("bot", "ticket-1\u2003")],
)
def test_a_name_with_white_space_at_an_end_is_refused_and_nothing_is_written(
    tmp_path: Path, actor: str, session: str | None
) -> None:
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    with Vault.open(tmp_path / "v", key=key) as vault:
        before = commit_count(vault.path)
        with pytest.raises(VaultError) as info:  # at once, before any call
            VaultMemoryTool(vault, actor=actor, session=session)
        kind = "session" if session is not None else "actor"
        shown = session if session is not None else actor
        assert str(info.value) == (
            f"Error: the {kind} {shown!r} begins or ends with white space, which git does not record as "
            "given; give it without."
        )
        with pytest.raises(VaultError, match="begins or ends with white space"):
            vault.mutate(lambda snap: Change("create", writes=[]), actor=actor, session=session)
        assert commit_count(vault.path) == before


def test_the_cli_refuses_an_actor_with_a_space_at_an_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vaultmem.cli.app import main

    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    before = commit_count(tmp_path / "v")
    monkeypatch.setenv("VAULTMEM_KEY", key)
    call = '{"command": "create", "path": "/memories/a.txt", "file_text": "x"}'
    assert main(["--vault", str(tmp_path / "v"), "call", "--actor", "ops ", call]) != 0
    said = capsys.readouterr()  # `call` prints what the tool would answer, as Claude would see it
    assert "the actor 'ops ' begins or ends with white space" in said.out + said.err
    assert "Traceback" not in said.out + said.err
    assert commit_count(tmp_path / "v") == before
