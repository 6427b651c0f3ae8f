"""Helpers for the tests that run stock git beside vaultmem (test_stock_git.py,
test_disk_full.py): git runs, file listings, leftovers, and the processes of
the concurrent runs.

Run as a script, this file is the helper that forks those processes (a
vaultmem writer, a loop of stock git, a libgit2 writer on another ref, a
writer killed at one step of its write) from one import of vaultmem, taken
from ``PYTHONPATH`` like any program of a user's; each process reports what
it did to a file the test reads after it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()

# The steps of a write to any ref, as ``vaultmem.commits.on_step`` names them.
STEPS = ("locked", "kept", "packed", "indexed", "journaled", "durable", "ref-locked", "moved", "unkept")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "operator",
    "GIT_AUTHOR_EMAIL": "operator@example.com",
    "GIT_COMMITTER_NAME": "operator",
    "GIT_COMMITTER_EMAIL": "operator@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def commits_module() -> Any:
    """``vaultmem.commits``, the one commit path; its absence fails the test (never skips it)."""
    import importlib

    import vaultmem

    package = Path(vaultmem.__file__).resolve().parent
    # Looked for in this package only: an editable install of another checkout
    # can otherwise supply a module this package lacks.
    where = package / "git" / "commits.py"
    assert where.is_file(), f"vaultmem has no single commit path: no {where}"
    return importlib.import_module("vaultmem.git.commits")


# -- git ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GitRun:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def clean(self) -> bool:
        """Succeeded, or failed the way git fails: an exit code and a message.
        Killed by a signal, or an internal error of git's, is not clean."""
        if self.returncode < 0:
            return False
        if any(word in self.stderr for word in ("BUG:", "Segmentation fault", "core dumped", "Aborted")):
            return False
        return self.returncode == 0 or bool(self.stderr.strip())

    def describe(self) -> str:
        return f"git {' '.join(self.args)} -> {self.returncode}: {self.stderr.strip()[:400]}"


def run_git(gitdir: Path | str, *args: str, stdin: str | None = None, timeout: float = 120) -> GitRun:
    result = subprocess.run(
        ["git", "-C", str(gitdir), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        timeout=timeout,
        check=False,
    )
    return GitRun(tuple(args), result.returncode, result.stdout, result.stderr)


def git_out(gitdir: Path | str, *args: str, stdin: str | None = None) -> str:
    run = run_git(gitdir, *args, stdin=stdin)
    assert run.returncode == 0, run.describe()
    return run.stdout


def fsck_strict(gitdir: Path | str) -> None:
    run = run_git(gitdir, "fsck", "--strict", "--no-progress", "--no-dangling")
    assert run.returncode == 0, f"git fsck --strict is not clean: {run.stdout}{run.stderr}"


def rev(gitdir: Path | str, name: str) -> str:
    return git_out(gitdir, "rev-parse", "--verify", "--quiet", name).strip()


def commit_count(gitdir: Path | str, ref: str = "refs/heads/main") -> int:
    return int(git_out(gitdir, "rev-list", "--count", ref).strip())


def memory_names(gitdir: Path | str, ref: str = "refs/heads/main") -> list[str]:
    """The memory files a commit holds, as ``/memories/...`` paths."""
    out = git_out(gitdir, "ls-tree", "-r", "--name-only", ref, "--", "memories/")
    return sorted(f"/{name}" for name in out.split("\n") if name)


def trailer_counts(gitdir: Path | str, ref: str = "refs/heads/main") -> dict[tuple[str, str], int]:
    """How many commits of ``ref``'s history each (session, command) has, from the trailers."""
    out = git_out(gitdir, "log", ref, "--format=%x01%B")
    counts: dict[tuple[str, str], int] = {}
    for message in out.split("\x01")[1:]:
        fields = dict(line.split(": ", 1) for line in message.strip().split("\n\n")[-1].split("\n") if ": " in line)
        session = fields.get("Vaultmem-Session", "")
        command = fields.get("Vaultmem-Command", "")
        counts[(session, command)] = counts.get((session, command), 0) + 1
    return counts


# -- what is on disk ------------------------------------------------------------------

READ_LOG = "vaultmem/reads"  # expiry's record of reads: the one file a read may write


def listing(gitdir: Path, exclude: Iterable[str] = (READ_LOG,)) -> dict[str, tuple[int, int]]:
    """Every file under the vault: relative path -> (size, mtime in ns)."""
    skip = set(exclude)
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(gitdir):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, gitdir)
            if rel in skip:
                continue
            st = os.lstat(full)
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def listing_diff(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    added = [f"+ {p}" for p in sorted(after.keys() - before.keys())]
    removed = [f"- {p}" for p in sorted(before.keys() - after.keys())]
    changed = [
        f"~ {p} {before[p]} -> {after[p]}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]
    ]
    return added + removed + changed


def leftovers(gitdir: Path) -> list[str]:
    """Lock files, keep files and temporary files anywhere in the vault's git folders."""
    found: list[str] = []
    for root, _dirs, files in os.walk(gitdir):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), gitdir)
            if rel.startswith("vaultmem" + os.sep):
                continue  # vaultmem's own state folder: its lock file is meant to stay
            if name.endswith((".lock", ".keep")) or name.startswith(("tmp_", "tmp-", ".tmp")):
                found.append(rel)
    return sorted(found)


def pack_files(gitdir: Path) -> set[str]:
    folder = gitdir / "objects" / "pack"
    return set(os.listdir(folder)) if folder.is_dir() else set()


def make_git_lock(path: Path, content: bytes) -> None:
    """Take a lock file the way git does: created exclusively, written, left for its owner to remove."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)


# -- the writers of the concurrent runs -------------------------------------------------

SHARED = "/memories/shared.txt"


def writer_op(w: int, i: int) -> dict[str, Any]:
    """Writer ``w``'s i-th call: a file of its own, an edit of that file, a line into the shared file."""
    if i % 3 == 0:
        return {"command": "create", "path": f"/memories/w{w}/f{i}.txt", "file_text": f"w{w} f{i}\n"}
    if i % 3 == 1:
        base = i - 1
        return {
            "command": "str_replace",
            "path": f"/memories/w{w}/f{base}.txt",
            "old_str": f"f{base}",
            "new_str": f"f{base} edited",
        }
    return {"command": "insert", "path": SHARED, "insert_line": 0, "insert_text": f"w{w}-{i}"}


def session_of(w: int) -> str:
    return f"stockgit-w{w}"


@dataclass
class WriterLog:
    acked: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> WriterLog:
        log = cls()
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["ok"]:
                log.acked.append(record["i"])
            else:
                log.refused[record["i"]] = record["message"]
        return log

    def count(self, command: str, w: int) -> int:
        return sum(1 for i in self.acked if writer_op(w, i)["command"] == command)


def expected_files(w: int, acked: Iterable[int]) -> dict[str, str]:
    done = set(acked)
    files: dict[str, str] = {}
    for i in sorted(done):
        op = writer_op(w, i)
        if op["command"] == "create":
            files[op["path"]] = op["file_text"]
        elif op["command"] == "str_replace":
            files[op["path"]] = files[op["path"]].replace(op["old_str"], op["new_str"], 1)
    return files


def expected_shared_lines(w: int, acked: Iterable[int]) -> list[str]:
    """Writer ``w``'s lines of the shared file, top to bottom (each insert goes on top)."""
    return [writer_op(w, i)["insert_text"] for i in sorted(acked, reverse=True) if i % 3 == 2]


def _report(out: Any, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _wait_for(go: str, limit: float = 120) -> None:
    """Start together: every process of a run waits for the test's go file."""
    deadline = time.monotonic() + limit
    while not os.path.exists(go):
        if time.monotonic() >= deadline:
            raise TimeoutError("the test never said go")
        time.sleep(0.001)


def _writer(go: str, vault: str, w: int, seconds: float, limit: int, out_path: str) -> None:
    from anthropic.lib.tools import ToolError

    from vaultmem import Vault, VaultMemoryTool

    tool = VaultMemoryTool(Vault.open(vault), actor=f"writer-{w}", session=session_of(w))
    with open(out_path, "a", encoding="utf-8") as out:
        _wait_for(go)
        deadline = time.monotonic() + seconds
        for i in range(limit):
            if time.monotonic() >= deadline:
                break
            try:
                tool.call(writer_op(w, i))
            except ToolError as err:
                _report(out, {"i": i, "ok": False, "message": str(err.content)})
            else:
                _report(out, {"i": i, "ok": True})


def _scratch(go: str, vault: str, seconds: float, limit: int, out_path: str, stop: str) -> None:
    """Another libgit2 program committing to refs/heads/scratch of the same repository."""
    import pygit2

    repo = pygit2.Repository(vault)
    who = pygit2.Signature("scratch", "scratch@example.com")
    with open(out_path, "a", encoding="utf-8") as out:
        _wait_for(go)
        deadline = time.monotonic() + seconds
        for n in range(limit):
            if time.monotonic() >= deadline or os.path.exists(stop):
                break
            try:
                blob = repo.create_blob(f"scratch note {n}\n".encode())
                builder = repo.TreeBuilder()
                builder.insert("note.txt", blob, pygit2.enums.FileMode.BLOB)
                tree = builder.write()
                ref = repo.references.get("refs/heads/scratch")
                parents = [ref.target] if ref is not None else []
                repo.create_commit("refs/heads/scratch", who, who, f"scratch {n}", tree, parents)
            except (pygit2.GitError, OSError) as err:
                _report(out, {"i": n, "ok": False, "message": str(err)})
            else:
                _report(out, {"i": n, "ok": True})


def stock_git_round(kind: str, vault: str, work: str, n: int) -> list[GitRun]:
    """One round of what an operator, auditor or sync job runs against the vault."""
    if kind == "mixed":  # the maintenance commands in turn
        return stock_git_round(("gc", "repack", "pack-refs", "prune", "fsck")[n % 5], vault, work, n // 5)
    if kind == "gc":
        return [run_git(vault, "gc", "--quiet")]
    if kind == "gc-auto":
        # The vault turns automatic gc off (gc.auto=0); these settings are what a
        # user's `git -c ...` or a repository left with the defaults would run.
        settings = ("-c", "gc.auto=1", "-c", "gc.autoPackLimit=2", "-c", "gc.autoDetach=false")
        return [run_git(vault, *settings, "gc", "--auto", "--quiet")]
    if kind == "repack":
        return [run_git(vault, "repack", "-a", "-d", "-q")]
    if kind == "pack-refs":
        return [run_git(vault, "pack-refs", "--all")]
    if kind == "prune":
        return [run_git(vault, "prune")]
    if kind == "fsck":
        return [run_git(vault, "fsck", "--no-progress")]
    if kind == "fetch":
        other = os.path.join(work, "other.git")
        blob = git_out(other, "hash-object", "-w", "--stdin", stdin=f"upstream note {n}\n" * (1 + n % 7)).strip()
        tree = git_out(other, "mktree", stdin=f"100644 blob {blob}\tnote.txt\n").strip()
        parent = run_git(other, "rev-parse", "--verify", "--quiet", "refs/heads/feed").stdout.strip()
        commit = git_out(other, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", f"upstream {n}")
        git_out(other, "update-ref", "refs/heads/feed", commit.strip())
        limit = "fetch.unpackLimit=1" if n % 2 else "fetch.unpackLimit=100"  # a kept pack, or loose objects
        return [
            run_git(vault, "-c", limit, "fetch", "--quiet", "--no-tags", other, "+refs/heads/*:refs/remotes/other/*")
        ]
    if kind == "push":
        mirror = os.path.join(work, "mirror.git")
        return [run_git(vault, "push", "--quiet", mirror, "refs/heads/*:refs/heads/*")]
    if kind == "update-ref":
        runs = [run_git(vault, "update-ref", "refs/heads/operator", "refs/heads/main")]
        runs.append(run_git(vault, "update-ref", f"refs/tags/checkpoint-{n % 5}", "refs/heads/main"))
        if n % 4 == 3:
            runs.append(run_git(vault, "update-ref", "-d", "refs/heads/operator"))
        return runs
    raise ValueError(kind)


def _gitloop(go: str, kind: str, vault: str, work: str, seconds: float, limit: int, out_path: str, stop: str) -> None:
    with open(out_path, "a", encoding="utf-8") as out:
        _wait_for(go)
        deadline = time.monotonic() + seconds
        for n in range(limit):
            if time.monotonic() >= deadline or os.path.exists(stop):
                break
            for run in stock_git_round(kind, vault, work, n):
                _report(out, {"args": run.args, "rc": run.returncode, "stderr": run.stderr[-2000:]})


def _die(go: str, vault: str, step: str, path: str) -> None:
    """A writer killed (as by SIGKILL: no cleanup, no buffers flushed) at one step of its write."""
    import vaultmem.git.commits as commits
    from vaultmem import Vault, VaultMemoryTool

    tool = VaultMemoryTool(Vault.open(vault), actor="killed", session=f"killed-at-{step}")
    _wait_for(go)

    def hook(name: str) -> None:
        if name == step:
            os._exit(9)

    commits.on_step = hook
    tool.call({"command": "create", "path": path, "file_text": f"written when killed at {step}\n"})
    os._exit(0)  # the step never came


ROLES = {"writer": _writer, "scratch": _scratch, "gitloop": _gitloop, "die": _die}


def _convert(role: str, args: list[str]) -> list[Any]:
    """Command-line strings to each role's argument types."""
    if role == "writer":
        return [args[0], int(args[1]), float(args[2]), int(args[3]), args[4]]
    if role == "scratch":
        return [args[0], float(args[1]), int(args[2]), args[3], args[4]]
    if role == "gitloop":
        return [args[0], args[1], args[2], float(args[3]), int(args[4]), args[5], args[6]]
    return list(args)


def zygote() -> None:
    """A single-threaded process that imports vaultmem once and forks each
    process of a run (importing the SDK costs seconds; a fork, nothing).

    Reads commands on stdin, answers one line each:
    ``spawn KEY GO ERRFILE ROLE ARGS...`` -> ``pid N`` (the child waits for the
    file GO, then plays ROLE; its traceback, if any, goes to ERRFILE), and
    ``wait N`` -> ``exit CODE``.
    """
    import pygit2  # noqa: F401  (imported once, before any fork)
    from anthropic.lib.tools import ToolError  # noqa: F401

    import vaultmem  # noqa: F401

    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "spawn":
            key, go, err_path, role, args = words[1], words[2], words[3], words[4], words[5:]
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    os.dup2(fd, 2)
                    os.environ["VAULTMEM_KEY"] = key
                    ROLES[role](go, *_convert(role, args))
                    code = 0
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            print(f"pid {pid}", flush=True)
        elif words[0] == "wait":
            _, status = os.waitpid(int(words[1]), 0)
            print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)


class Zygote:
    """The test's side of :func:`zygote`."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            env={**os.environ, **GIT_ENV},
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the helper process died"
        return line.strip()

    def _send(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._line()

    def spawn(self, key: str, go: Path, err: Path, role: str, *args: str) -> int:
        answer = self._send(" ".join(["spawn", key, str(go), str(err), role, *args]))
        assert answer.startswith("pid "), answer
        return int(answer.split()[1])

    def wait(self, pid: int) -> int:
        answer = self._send(f"wait {pid}")
        assert answer.startswith("exit "), answer
        return int(answer.split()[1])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        zygote()
    else:
        raise SystemExit("usage: stockgit_helpers.py zygote")
