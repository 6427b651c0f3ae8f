"""One backend of a benchmark in a process of its own, as an application runs
it: no other backend, no MCP client and no other vault shares its
interpreter, so no other's background threads hold up its calls.

    python bench/worker.py vaultmem VAULT SESSION   # VaultMemoryTool, the key in VAULTMEM_KEY
    python bench/worker.py sdk FOLDER               # the SDK's BetaLocalFilesystemMemoryTool
    python bench/worker.py durable-sdk FOLDER       # bench/backends.py's DurableSDK

Reads one JSON object per line on standard input and answers each with one
line: ``{"call": PARAMS}`` runs ``tool.call(PARAMS)`` and answers
``{"elapsed": SECONDS, "text": RESULT}``, the wall time taken around that
call alone (time.perf_counter), as the benchmarks time a call made in their
own process, or ``{"error": TEXT}`` when the call raised;
``{"versions": true}`` answers ``{"versions": N}``, a vault's versions other
than its import.  End of input closes the backend.  :class:`ToolProcess`
(bench/backends.py) is the other end.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from anthropic.tools import BetaLocalFilesystemMemoryTool  # noqa: E402
from backends import DurableSDK  # noqa: E402

from vaultmem import Vault, VaultMemoryTool  # noqa: E402

ACTOR = "claude"  # as bench/mcp_speed.py's direct paths


def serve(tool: Any, vault: Vault | None) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "call" in request:
            start = time.perf_counter()
            try:
                result = tool.call(request["call"])
            except Exception as err:  # the SDK's ToolError: the run stops on it
                answer: dict[str, object] = {"error": str(err)}
            else:
                elapsed = time.perf_counter() - start
                answer = {"elapsed": elapsed, "text": result if isinstance(result, str) else repr(result)}
        elif vault is not None:
            answer = {"versions": sum(1 for v in vault.history() if v.command != "import")}
        else:
            answer = {"error": "not a vault"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    kind, folder, *rest = argv
    with contextlib.ExitStack() as stack:
        if kind == "vaultmem":
            vault = stack.enter_context(Vault.open(folder))
            serve(VaultMemoryTool(vault, actor=ACTOR, session=rest[0]), vault)
        elif kind == "sdk":
            serve(BetaLocalFilesystemMemoryTool(base_path=folder), None)
        elif kind == "durable-sdk":
            serve(DurableSDK(folder), None)
        else:
            raise SystemExit(f"unknown backend {kind!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
