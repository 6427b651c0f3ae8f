"""Pure rules, no I/O: memory paths, text, encryption, the secret detectors."""
