"""A vault as a repository: open, init, head, snapshots, revisions, one
mutation as one commit; its history, verify, and the side branches (the
keyring, the policy)."""
