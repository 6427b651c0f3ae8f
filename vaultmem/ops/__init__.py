"""Verbs over a vault, one module per family: the policy guard for memory
commands, import and export, expiry, diff."""
