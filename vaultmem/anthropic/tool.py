"""The memory tool as the Anthropic SDK's tool runner calls it:
``VaultMemoryTool`` and ``AsyncVaultMemoryTool`` run the commands of
:mod:`vaultmem.ops.memory` and turn a refusal into the SDK's ``ToolError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex

import anyio.to_thread
from anthropic.lib.tools import ToolError
from anthropic.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from vaultmem.core.policy import Policy
from vaultmem.core.signing import SigningKey, resolve_signing_key
from vaultmem.errors import CommandError, VaultError
from vaultmem.ops.autosync import AutoSync
from vaultmem.ops.memory import DEFAULT_VIEW_CAP, MemoryCommands, check_who, new_session
from vaultmem.vault import NOT_SENT, Vault

__all__ = ["AsyncVaultMemoryTool", "ToolError", "VaultMemoryTool"]

if TYPE_CHECKING:
    from vaultmem.core.detectors import Detector


class _VaultTool:
    """What the sync and async tools share: the commands and who they act as."""

    commands: MemoryCommands
    _vault: Vault

    def _setup(
        self,
        vault: Vault,
        actor: str,
        session: str | None,
        max_file_bytes: int | None,
        view_cap: int,
        policy: Policy | Mapping[str, Any] | None,
        detectors: Iterable[Detector],
        sync: str | None = None,
        sync_every: float | None = None,
        signing_key: SigningKey | str | os.PathLike[str] | None = None,
        signing_passphrase: str | None = None,
    ) -> None:
        if not isinstance(vault, Vault):  # a vault's path, say: said here, not as an AttributeError below
            raise VaultError(
                f"Error: the first argument must be an open vault, not {type(vault).__name__}: "
                f"{type(self).__name__}(Vault.open(path, key=...), actor=...)."
            )
        # Checked once, here: at a write, a name git cannot record would be a
        # tool error Claude can do nothing about, on every mutation.
        check_who(actor, session)
        self._vault = vault
        key = resolve_signing_key(signing_key, signing_passphrase)
        if key is not None:
            vault.sign_as(actor, key)
        self.commands = MemoryCommands(
            vault,
            actor=actor,
            session=session or new_session(),
            max_file_bytes=max_file_bytes,
            view_cap=view_cap,
            policy=policy,
            detectors=detectors,
            sync=sync,
            sync_every=sync_every,
        )

    def _run(self, raw: object) -> str:
        try:
            return self.commands.run(raw)
        except CommandError as err:
            raise ToolError(str(err)) from err.__cause__

    def _clear(self) -> str:
        try:
            return self.commands.clear()
        except CommandError as err:
            raise ToolError(str(err)) from err.__cause__

    @property
    def vault(self) -> Vault:
        return self._vault

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        """Refuse pickling with what to do instead (see :meth:`Vault.__reduce_ex__`)."""
        how = f"make the tool there: {type(self).__name__}(Vault.open(path, key=...), actor=...)"
        raise TypeError(NOT_SENT.format(what=f"This {type(self).__name__}", how=how))

    @property
    def actor(self) -> str:
        return self.commands.actor

    @property
    def session(self) -> str | None:
        return self.commands.session

    @property
    def autosync(self) -> AutoSync | None:
        """The tool's automatic sync (``sync=``): ``flush(timeout)`` waits for
        the pushes of what was acknowledged, ``close()`` ends it."""
        return self.commands.autosync


class VaultMemoryTool(_VaultTool, BetaAbstractMemoryTool):
    """Claude's memory tool backed by a vault; drop it into ``tool_runner``.

    ``call()`` takes the tool input as Claude sends it (a plain dict) and returns
    the result string, or raises ``ToolError`` with SPEC.md's message.  Without
    ``session``, each tool gets a random ``sess-...`` id.
    """

    def __init__(
        self,
        vault: Vault,
        *,
        actor: str = "claude",
        session: str | None = None,
        max_file_bytes: int | None = None,
        view_cap: int = DEFAULT_VIEW_CAP,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        detectors: Iterable[Detector] = (),
        sync: str | None = None,
        sync_every: float | None = None,
        signing_key: SigningKey | str | os.PathLike[str] | None = None,
        signing_passphrase: str | None = None,
    ) -> None:
        BetaAbstractMemoryTool.__init__(self, cache_control=cache_control)
        self._setup(
            vault,
            actor,
            session,
            max_file_bytes,
            view_cap,
            policy,
            detectors,
            sync,
            sync_every,
            signing_key,
            signing_passphrase,
        )

    def call(self, input: object) -> str:
        return self._run(input)

    def execute(self, command: object) -> str:
        """Run a command object (or dict) as :meth:`call` does: an unknown
        command is a ``ToolError``, not the SDK's ``NotImplementedError``."""
        return self._run(command)

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self._run(command)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._run(command)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._run(command)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._run(command)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._run(command)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._run(command)

    def clear_all_memory(self) -> str:
        """Delete every memory file, as one audited commit (history keeps them)."""
        return self._clear()


class AsyncVaultMemoryTool(_VaultTool, BetaAsyncAbstractMemoryTool):
    """The same tool for the async client: each call runs in a worker thread."""

    def __init__(
        self,
        vault: Vault,
        *,
        actor: str = "claude",
        session: str | None = None,
        max_file_bytes: int | None = None,
        view_cap: int = DEFAULT_VIEW_CAP,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        detectors: Iterable[Detector] = (),
        sync: str | None = None,
        sync_every: float | None = None,
        signing_key: SigningKey | str | os.PathLike[str] | None = None,
        signing_passphrase: str | None = None,
    ) -> None:
        BetaAsyncAbstractMemoryTool.__init__(self, cache_control=cache_control)
        self._setup(
            vault,
            actor,
            session,
            max_file_bytes,
            view_cap,
            policy,
            detectors,
            sync,
            sync_every,
            signing_key,
            signing_passphrase,
        )

    async def call(self, input: object) -> str:
        return await anyio.to_thread.run_sync(self._run, input)

    async def execute(self, command: object) -> str:
        """Run a command object (or dict) as :meth:`call` does (see :meth:`VaultMemoryTool.execute`)."""
        return await self.call(command)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await self.call(command)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self.call(command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self.call(command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self.call(command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self.call(command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self.call(command)

    async def clear_all_memory(self) -> str:
        """Delete every memory file, as one audited commit (history keeps them)."""
        return await anyio.to_thread.run_sync(self._clear)
