"""The modules' old names: ``vaultmem.commits`` and the like (the flat
layout of 0.1) import as the very module at its new home, so code written
against them, monkeypatching included, keeps working."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "vaultmem." + old: "vaultmem." + new
    for old, new in {
        "paths": "core.paths",
        "text": "core.text",
        "crypto": "core.crypto",
        "secrets": "core.detectors",
        "objects": "git.objects",
        "durable": "git.durable",
        "journal": "git.journal",
        "fresh": "git.fresh",
        "commits": "git.commits",
        "upkeep": "git.upkeep",
        "snapshot": "git.snapshot",
        "store": "vault",
        "history": "repo.history",
        "verify": "repo.verify",
        "keys": "repo.keys",
        "policy": "repo.policy",
        "guard": "ops.guard",
        "transfer": "ops.transfer",
        "expiry": "ops.expiry",
        "diff": "ops.diff",
        "tool": "anthropic.tool",
        "agent": "anthropic.agent",
        "chat": "cli.chat",
        "demo": "cli.demo",
        "progress": "cli.progress",
        "replay": "testing.replay",
    }.items()
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new home.  Importing it under
        the old name gave it the old name's spec; it gets its own back."""
        module.__spec__ = importlib.util.spec_from_file_location(module.__name__, module.__file__)


def install() -> None:
    if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
        sys.meta_path.append(_OldNames())
