"""vaultmem as a Model Context Protocol server (``vaultmem[mcp]``; docs/mcp.md)."""
