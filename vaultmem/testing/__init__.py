"""For tests and demos, off the runtime import path: a local stand-in for the
Messages API (``vaultmem.testing.replay``)."""
