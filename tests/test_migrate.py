"""Format 1 to format 2: lossless, crash-safe, every kind of format 1 vault.

Each vault below is made in format 1 the way users made them (plain writes,
renames, deletes, a rotated key, a re-encryption, a passphrase, a policy, an
import, two clones merged through a server); the migration must keep every
commit id, every seal, every version's content and ``verify``; new writes then
use per-version keys, and those can be erased."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest
from test_erasure import assert_no_key_left

from tests.conftest import FakeClock, git
from vaultmem import SigningError, SigningKey, Vault, VaultMemoryTool, generate_key
from vaultmem.errors import ErasedError, VaultError
from vaultmem.git import commits

PASSPHRASE = "correct horse battery staple 42"


def write(vault: Vault, actor: str = "bot", **call: object) -> str:
    return VaultMemoryTool(vault, actor=actor).call(call)


def plain(vault: Vault) -> None:
    write(vault, command="create", path="/memories/a.md", file_text="alpha\n")
    write(vault, command="str_replace", path="/memories/a.md", old_str="alpha", new_str="alpha two")
    write(vault, command="create", path="/memories/dir/b.md", file_text="bravo\n")
    write(vault, command="rename", old_path="/memories/dir", new_path="/memories/folder")
    write(vault, command="insert", path="/memories/a.md", insert_line=0, insert_text="first line")
    write(vault, command="delete", path="/memories/folder/b.md")


def rotated(vault: Vault) -> None:
    plain(vault)
    vault.rotate_key()
    write(vault, command="create", path="/memories/c.md", file_text="charlie\n")
    vault.rotate_key(reencrypt=True)


def with_policy(vault: Vault) -> None:
    plain(vault)
    vault.set_policy(max_files=50, actor="ops")
    write(vault, command="create", path="/memories/d.md", file_text="delta\n")


def imported(vault: Vault, tmp: Path) -> None:
    folder = tmp / "sdk"
    (folder / "memories" / "x").mkdir(parents=True)
    (folder / "memories" / "x" / "one.md").write_text("one\n")
    (folder / "memories" / "two.md").write_text("two\n")
    vault.import_folder(folder, actor="ops")
    write(vault, command="create", path="/memories/e.md", file_text="echo\n")


def merged(vault: Vault, tmp: Path, key: str) -> None:
    server = tmp / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    write(vault, command="create", path="/memories/shared.md", file_text="one\ntwo\nthree\n")
    vault.add_remote("origin", str(server))
    vault.push()
    with Vault.clone(str(server), tmp / "other.vault", key=key) as other:
        write(other, command="str_replace", path="/memories/shared.md", old_str="one", new_str="ONE")
        other.push()
    write(vault, command="str_replace", path="/memories/shared.md", old_str="three", new_str="THREE")
    vault.pull(actor="bot")


SCENARIOS: dict[str, Callable[..., None]] = {
    "plain": plain,
    "rotated": rotated,
    "policy": with_policy,
    "import": imported,
    "merged": merged,
    "passphrase": plain,
}


def make(name: str, tmp: Path, key: str) -> tuple[Vault, dict[str, object]]:
    clock = FakeClock()
    if name == "passphrase":
        vault = Vault.init(tmp / "v1.vault", passphrase=PASSPHRASE, clock=clock, storage_format=1)
        opener: dict[str, object] = {"passphrase": PASSPHRASE}
    else:
        vault = Vault.init(tmp / "v1.vault", key=key, clock=clock, storage_format=1)
        opener = {"key": key}
    scenario = SCENARIOS[name]
    if name == "import":
        scenario(vault, tmp)
    elif name == "merged":
        scenario(vault, tmp, key)
    else:
        scenario(vault)
    assert vault.keyring.format == 1
    return vault, opener


def every_version(vault: Vault) -> dict[tuple[str, str], str]:
    """Every file's content at every version of the history."""
    out = {}
    for version in vault.history():
        for entry in vault.listing("/memories", at=version.id, depth=100):
            if entry.kind == "file":
                out[(version.id, entry.path)] = vault.read(entry.path, at=version.id)
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_kind_of_format_1_vault_migrates_losslessly(tmp_path: Path, key: str, name: str) -> None:
    vault, opener = make(name, tmp_path, key)
    path = tmp_path / "v1.vault"
    refs_before = git(path, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main")
    ids_before = git(path, "rev-list", "main", "--branches=vaultmem-policy").split()
    main_before = git(path, "rev-list", "main").split()
    contents = every_version(vault)
    policy_before = vault.policy.to_dict()
    vault.close()
    reopened = Vault.open(path, **opener)  # type: ignore[arg-type]
    (version, file), text = next(iter(contents.items()))
    assert reopened.read(file, at=version) == text  # a format 1 vault reads as it is
    assert reopened.migrate() is True
    assert reopened.migrate() is False  # once only
    assert reopened.keyring.format == 2
    # every commit of main keeps its id, the history is the same, every version reads the same
    assert git(path, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main") == refs_before
    assert git(path, "rev-list", "main").split() == main_before
    # main's and the policy's commits all stay; the keyring's history goes (it held the data keys)
    assert set(ids_before) <= set(git(path, "rev-list", "--all").split())
    assert git(path, "rev-list", "--count", "refs/heads/vaultmem-keyring").strip() == "1"
    migrated = Vault.open(path, **opener)  # type: ignore[arg-type]
    assert every_version(migrated) == contents
    assert migrated.policy.to_dict() == policy_before
    report = migrated.verify()
    assert report.ok, report.problems
    subprocess.run(["git", "-C", str(path), "fsck", "--strict"], check=True, capture_output=True)
    # new writes use per-version keys, and those can be erased
    write(migrated, command="create", path="/memories/new.md", file_text="written after the migration\n")
    header = git(path, "cat-file", "blob", "main:memories/new.md").split("\n")[0]
    assert header.startswith("vaultmem-blob 2 ")
    migrated.forget("/memories/new.md", reason="test")
    with pytest.raises(ErasedError):
        migrated.read("/memories/new.md", at="main~1")
    # a version written before the migration can be erased too: through its shadow
    old_path = {"merged": "/memories/shared.md", "import": "/memories/e.md"}.get(name, "/memories/a.md")
    erased = migrated.forget(old_path, reason="test")
    assert erased.versions and erased.commit is not None
    for version in erased.versions:
        with pytest.raises(ErasedError):
            Vault.open(path, **opener).read(version.path, at=version.version)  # type: ignore[arg-type]
    kept = {k: v for k, v in contents.items() if not k[1].startswith(old_path)}
    reread = Vault.open(path, **opener)  # type: ignore[arg-type]
    for (version, file), text in kept.items():
        if not any(v.blob == _blob_at(path, version, file) for v in erased.versions):
            assert reread.read(file, at=version) == text
    assert Vault.open(path, **opener).verify().ok  # type: ignore[arg-type]


def _blob_at(path: Path, version: str, file: str) -> str:
    return git(path, "rev-parse", f"{version}:{file.lstrip('/')}").strip()


MIGRATE_AND_DIE = r"""
import os, sys
from vaultmem import Vault
from vaultmem.git import commits
path, key, mode = sys.argv[1:4]
seen = []
def die(name):
    seen.append(name)
    if mode != "count" and len(seen) == int(mode):
        os._exit(7)
commits.on_step = die
Vault.open(path, key=key).migrate()
print(len(seen))
"""


def test_a_migration_killed_at_any_step_is_before_or_after_and_can_be_run_again(tmp_path: Path, key: str) -> None:
    vault, _ = make("rotated", tmp_path, key)
    vault.close()
    template = tmp_path / "v1.vault"
    counted = subprocess.run(
        [sys.executable, "-c", MIGRATE_AND_DIE, str(shutil.copytree(template, tmp_path / "count")), key, "count"],
        capture_output=True,
        text=True,
    )
    assert counted.returncode == 0, counted.stderr
    steps = int(counted.stdout.split()[-1])
    assert steps >= 5
    for k in range(1, steps + 1):
        case = shutil.copytree(template, tmp_path / f"case-{k}")
        died = subprocess.run([sys.executable, "-c", MIGRATE_AND_DIE, str(case), key, str(k)], capture_output=True)
        assert died.returncode == 7, k
        subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
        after = Vault.open(case, key=key)
        assert after.keyring.format in (1, 2)
        report = after.verify()  # at most: the old keyring still on the disk, until the next write
        assert all("still on the disk" in f.detail for f in report.findings), (k, report.problems)
        write(after, command="create", path="/memories/next.md", file_text="n\n")  # writable either way
        Vault.open(case, key=key).migrate()
        final = Vault.open(case, key=key)
        assert final.keyring.format == 2 and final.verify().ok, k
        assert final.read("/memories/c.md") == "charlie\n"


@pytest.mark.parametrize("gc", [False, True])
def test_a_migration_killed_after_its_keyring_moved_leaves_no_format_1_key(tmp_path: Path, key: str, gc: bool) -> None:
    """The format 1 keyring holds the data keys every old version shares.
    Killed at any step from the new keyring's commit on (its packs loose or in
    vaultmem's packs, or in one `git gc` made), the migration recorded the old
    keyring first: verify reports the copy, and the next write, or the
    migration run again, removes it; no keyring on the disk opens a format 1
    version any more."""
    path = tmp_path / "v1.vault"
    vault = Vault.init(path, key=key, storage_format=1)
    write(vault, command="create", path="/memories/a.md", file_text="ada@example.com\n")
    write(vault, command="str_replace", path="/memories/a.md", old_str="ada", new_str="ada.l")
    blobs = [vault.read_blob(bytes.fromhex(_blob_at(path, v.id, "/memories/a.md"))) for v in vault.history()]
    vault.close()
    if gc:
        # no commit-graph: prune.drop removes one naming the old keyring only after its packs
        git(path, "-c", "gc.writeCommitGraph=false", "gc", "--quiet")
    names: list[str] = []
    commits.on_step = names.append
    try:
        Vault.open(shutil.copytree(path, tmp_path / "count"), key=key).migrate()
    finally:
        commits.on_step = None
    first = names.index("migrate-shadowed") + 1
    for k in range(first, len(names) + 1):
        for finish in ("write", "migrate"):
            case = shutil.copytree(path, tmp_path / f"case-{k}-{finish}")
            died = subprocess.run([sys.executable, "-c", MIGRATE_AND_DIE, str(case), key, str(k)], capture_output=True)
            assert died.returncode == 7, k
            subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)
            with Vault.open(case, key=key) as after:
                report = after.verify()
                assert {f.kind for f in report.findings} <= {"erasure"}, (k, report.problems)
                if finish == "write":
                    write(after, command="create", path="/memories/next.md", file_text="n\n")
            with Vault.open(case, key=key) as after:
                after.migrate()
            with Vault.open(case, key=key) as final:
                assert final.keyring.format == 2, k
                report = final.verify()
                assert report.ok, (k, report.problems)
                assert final.read("/memories/a.md") == "ada.l@example.com\n"
            assert_no_key_left(case, key, blobs)
            subprocess.run(["git", "-C", str(case), "fsck", "--strict"], check=True, capture_output=True)


def test_the_cli_migrates_and_says_so(tmp_path: Path) -> None:
    key = generate_key()
    vault = Vault.init(tmp_path / "v.vault", key=key, storage_format=1)
    write(vault, command="create", path="/memories/a.md", file_text="a\n")
    vault.close()
    env = {**os.environ, "VAULTMEM_KEY": key}
    run = [sys.executable, "-m", "vaultmem", "--vault", str(tmp_path / "v.vault"), "migrate"]
    first = subprocess.run(run, capture_output=True, text=True, env=env)
    assert first.returncode == 0 and "Migrated to storage format 2" in first.stdout, first.stderr
    second = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env)
    assert json.loads(second.stdout) == {"format": 2, "migrated": False, "sealed_names": False, "sealed_now": False}


def test_a_migrated_clone_pushes_and_other_clones_are_told_to_clone_again(tmp_path: Path, key: str) -> None:
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(server)], check=True)
    first = Vault.init(tmp_path / "a.vault", key=key, storage_format=1)
    write(first, command="create", path="/memories/ada.md", file_text="ada@example.com\n")
    first.add_remote("origin", str(server))
    first.push()
    second = Vault.clone(str(server), tmp_path / "b.vault", key=key)
    raw_keys = [k.fernet._signing_key + k.fernet._encryption_key for k in first.keyring.keys.values() if k.fernet]
    assert raw_keys
    first.migrate()
    first.sync(actor="a")  # the push replaces the server's format 1 keyring and sends the shadows
    for folder in (first.path, server):
        everything = subprocess.run(
            ["git", "-C", str(folder), "cat-file", "--batch-all-objects", "--batch"], capture_output=True, check=True
        ).stdout
        for raw in raw_keys:  # the format 1 data keys are gone from the migrated clone and the server
            assert raw not in everything
            assert base64.urlsafe_b64encode(raw) not in everything
    with pytest.raises(VaultError, match="migrated to storage format 2"):
        second.pull(actor="b")
    third = Vault.clone(str(server), tmp_path / "c.vault", key=key)
    assert third.keyring.format == 2
    assert third.read("/memories/ada.md") == "ada@example.com\n"  # through its shadow, fetched with the clone
    third.forget("/memories/ada.md", reason="GDPR request 4411")
    third.sync(actor="c")
    first.sync(actor="a")
    with pytest.raises(ErasedError):
        first.read("/memories/ada.md", at="main~1")
    assert Vault.open(first.path, key=key).verify().ok
    assert Vault.open(third.path, key=key).verify().ok


def test_a_shadow_swapped_for_another_is_caught(tmp_path: Path, key: str) -> None:
    """A shadow is bound to the format 1 blob it stands for: moved onto
    another version of the same file, it fails to open and verify says so."""
    vault, opener = make("plain", tmp_path, key)
    vault.migrate()
    path = tmp_path / "v1.vault"
    repo = pygit2.Repository(str(path))
    ref = repo.references["refs/heads/vaultmem-shadows"]
    tree = repo[ref.target].peel(pygit2.Commit).tree
    entries = [(sub.name, leaf.name, leaf.id) for sub in tree for leaf in repo[sub.id]]
    assert len(entries) >= 2
    (sa, la, ida), (sb, lb, idb) = entries[0], entries[1]
    swapped = {(sa, la): idb, (sb, lb): ida}
    root = repo.TreeBuilder()
    for sub in tree:
        builder = repo.TreeBuilder()
        for leaf in repo[sub.id]:
            builder.insert(leaf.name, swapped.get((sub.name, leaf.name), leaf.id), pygit2.enums.FileMode.BLOB)
        root.insert(sub.name, builder.write(), pygit2.enums.FileMode.TREE)
    sig = pygit2.Signature("mallory", "m@example.com")
    commit = repo.create_commit(None, sig, sig, "swap\n", root.write(), [])
    repo.references.create("refs/heads/vaultmem-shadows", commit, force=True)
    report = Vault.open(path, **opener).verify()  # type: ignore[arg-type]
    assert {f.kind for f in report.findings} == {"blob", "keyring"}, report.problems
    assert len([f for f in report.findings if f.kind == "blob"]) == 2
    assert "vaultmem-shadows branch's commit" in str(report.findings)  # made without the key: no seal


@pytest.mark.parametrize("hiding", ["info/grafts", "shallow"])
def test_migration_keeps_versions_a_grafts_or_shallow_file_hides(tmp_path: Path, key: str, hiding: str) -> None:
    """The migration destroys the format 1 data keys once every version has a
    shadow: it must reach every version through the parents the commits
    record, not the ones a grafts or shallow file makes git show, or the
    versions behind the cut could never be read again."""
    path = tmp_path / "v1.vault"
    vault = Vault.init(path, key=key, storage_format=1)
    write(vault, command="create", path="/memories/a.md", file_text="first\n")
    first = vault.history()[0].id
    write(vault, command="str_replace", path="/memories/a.md", old_str="first", new_str="second")
    write(vault, command="create", path="/memories/b.md", file_text="b\n")
    vault.close()
    (path / hiding).write_text(git(path, "rev-parse", "main").strip() + "\n")
    assert Vault.open(path, key=key).migrate() is True
    (path / hiding).unlink()
    reopened = Vault.open(path, key=key)
    assert reopened.read("/memories/a.md", at=first) == "first\n"
    assert reopened.verify().ok


# -- refused under the signature policy: nothing changes ----------------------------------


def signed_vault(path: Path, key: str, storage_format: int = 2) -> Vault:
    """A vault whose policy requires signed commits; ``ops`` signs, ``bot`` cannot."""
    vault = Vault.init(path, key=key, clock=FakeClock(), storage_format=storage_format)
    ops = SigningKey.generate()
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    write(vault, actor="ops", command="create", path="/memories/customers/ada.md", file_text="ada\n")
    vault.set_policy(actor="ops", require_signatures=True)
    return vault


def refs(path: Path) -> str:
    return git(path, "for-each-ref", "--format=%(refname) %(objectname)")


@pytest.mark.parametrize("storage_format", [1, 2])
def test_sealing_names_an_unsigned_actor_may_not_sign_changes_nothing(
    tmp_path: Path, key: str, storage_format: int
) -> None:
    """`migrate --sealed-names` makes a `seal-names` commit, which this policy
    requires signed: refused before the keyring gains a name key (or, in
    format 1, before the migration), so "nothing was changed" holds."""
    path = tmp_path / "v.vault"
    vault = signed_vault(path, key, storage_format)
    before = refs(path)
    with pytest.raises(SigningError, match="Nothing was changed"):
        vault.migrate(sealed_names=True, actor="bot")
    if storage_format == 2:
        with pytest.raises(SigningError, match="Nothing was changed"):
            vault.seal_names(actor="bot")
    assert refs(path) == before
    reopened = Vault.open(path, key=key)
    assert reopened.keyring.format == storage_format and not reopened.sealed_names
    reopened.sign_as("ops", vault.signing_key("ops"))
    write(reopened, actor="ops", command="create", path="/memories/next.md", file_text="n\n")
    assert "memories/customers/ada.md" in git(path, "ls-tree", "-r", "--name-only", "main")  # names stay plain
    assert reopened.migrate(sealed_names=True, actor="ops")  # the signer can
    assert reopened.sealed_names and reopened.verify().ok


def test_rotating_with_reencrypt_an_unsigned_actor_may_not_sign_changes_nothing(tmp_path: Path, key: str) -> None:
    """`key rotate --reencrypt` makes a `rekey` commit, which this policy
    requires signed: refused before the new data key is started."""
    path = tmp_path / "v.vault"
    vault = signed_vault(path, key)
    before, keys = refs(path), vault.keys()
    with pytest.raises(SigningError, match="Nothing was changed"):
        vault.rotate_key(reencrypt=True, actor="bot")
    assert refs(path) == before
    assert Vault.open(path, key=key).keys() == keys
    rotated = vault.rotate_key(reencrypt=True, actor="ops")  # the signer can
    assert rotated.active and vault.history()[0].command == "rekey"
    assert vault.verify().ok
