"""One direct path of bench/mcp_speed.py in a process of its own, as an
application embedding ``VaultMemoryTool`` runs it: no MCP client and no other
vault shares its interpreter.

    python bench/direct_worker.py VAULT NAME      # the key in VAULTMEM_KEY

Reads one JSON object per line on standard input and answers each with one
line: ``{"call": PARAMS}`` runs ``VaultMemoryTool.call(PARAMS)`` and answers
``{"elapsed": SECONDS, "text": RESULT}``, the wall time taken around that
call alone (time.perf_counter), as bench/mcp_speed.py's in-process direct
path takes it, or ``{"error": TEXT}`` when the call raised; ``{"versions": true}`` answers ``{"versions": N}``, the
vault's versions other than its import.  End of input closes the vault.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from vaultmem import Vault, VaultMemoryTool  # noqa: E402

ACTOR = "claude"  # as bench/mcp_speed.py's direct paths


def main(argv: list[str]) -> int:
    path, name = argv
    with Vault.open(path) as vault:
        tool = VaultMemoryTool(vault, actor=ACTOR, session=f"bench-{name}")
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
            else:
                answer = {"versions": sum(1 for v in vault.history() if v.command != "import")}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
