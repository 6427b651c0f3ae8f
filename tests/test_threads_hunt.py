"""Invariant 5 through the public API, as applications use it: many writers
at once on one vault (threads sharing a tool, threads with tools of their
own, several ``Vault.open`` of one path, processes), all six commands on
overlapping paths, policies in force, ``close()``, Ctrl-C and exceptions in
the middle.  Afterwards every acknowledged write is in ``history()`` exactly
once, one commit each, ``verify()`` and ``git fsck --strict`` are clean, and
the memory equals a sequential replay of the acknowledged calls in commit
order."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import commit_count, git

from vaultmem import AsyncVaultMemoryTool, Vault, VaultMemoryTool, generate_key

Call = dict[str, Any]


def fsck_clean(vault_path: Path) -> None:
    result = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True)
    assert result.returncode == 0, result.stderr


def run_threads(worker: Callable[[int], None], count: int, timeout: float = 60) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(t: int) -> None:
        try:
            start.wait()
            worker(t)
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
        assert not thread.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def files_of(vault: Vault) -> dict[str, str]:
    return {e.path: vault.read(e.path) for e in vault.listing() if e.kind == "file"}


class Ledger:
    """What each writer sent and what it was told, in its own order."""

    def __init__(self) -> None:
        self.acked: dict[str, list[tuple[Call, str]]] = {}  # actor -> (call, result) of each acknowledged mutation
        self.lock = threading.Lock()

    def run(self, tool: VaultMemoryTool, call: Call) -> str | None:
        try:
            result = tool.call(call)
        except ToolError as err:
            assert isinstance(err.content, str)
            assert "Traceback" not in err.content
            assert "storage error" not in err.content and "storage failed" not in err.content, err.content
            return None
        if call["command"] != "view":
            with self.lock:
                self.acked.setdefault(tool.actor, []).append((call, result))
        return result

    def count(self) -> int:
        return sum(len(calls) for calls in self.acked.values())


def check_against_replay(vault: Vault, vault_path: Path, ledger: Ledger, before: int = 0) -> None:
    """Each acknowledged call is one commit, by its actor, in the order the
    actor made them; a fresh vault given the same calls one at a time in
    commit order answers each the same and ends with the same memory."""
    history = list(reversed(vault.history()))[before:]
    assert len(history) == ledger.count() == commit_count(vault_path) - before
    assert git(vault_path, "rev-list", "--min-parents=2", "main") == ""
    queues = {actor: list(calls) for actor, calls in ledger.acked.items()}
    replay = Vault.init(vault_path.parent / "replay.vault", key=generate_key())
    try:
        seed = VaultMemoryTool(replay, actor="seed")
        for path, content in SEED.items():
            seed.call({"command": "create", "path": path, "file_text": content})
        for version in history:
            call, result = queues[version.actor].pop(0)
            assert version.command == call["command"]
            assert VaultMemoryTool(replay, actor=version.actor).call(call) == result, (call, version)
        assert all(not left for left in queues.values())
        assert files_of(replay) == files_of(vault)
    finally:
        replay.close()
    assert vault.verify().ok
    fsck_clean(vault_path)


SEED = {
    "/memories/shared.txt": "".join(f"slot {n} empty\n" for n in range(40)),
    "/memories/dir/a.txt": "alpha\n",
    "/memories/dir/b.txt": "beta\n",
}


def seed(tool: VaultMemoryTool) -> None:
    for path, content in SEED.items():
        tool.call({"command": "create", "path": path, "file_text": content})


def random_calls(t: int, count: int, rng: random.Random) -> list[Call]:
    """All six commands on paths every thread touches."""
    out: list[Call] = []
    for j in range(count):
        pick = rng.randrange(9)
        target = rng.choice(["/memories/dir/a.txt", "/memories/dir2/a.txt", "/memories/shared.txt", "/memories/x.txt"])
        if pick == 0:
            out.append({"command": "view", "path": rng.choice(["/memories", target])})
        elif pick == 1:
            out.append(
                {
                    "command": "create",
                    "path": rng.choice(["/memories/x.txt", "/memories/dir/c.txt"]),
                    "file_text": f"{t}.{j}\n",
                }
            )
        elif pick in (2, 3):
            n = rng.randrange(40)
            out.append(
                {
                    "command": "str_replace",
                    "path": "/memories/shared.txt",
                    "old_str": f"slot {n} empty",
                    "new_str": f"slot {n} by {t}.{j}",
                }
            )
        elif pick == 4:
            out.append({"command": "str_replace", "path": target, "old_str": "a", "new_str": f"a{t}"})
        elif pick == 5:
            out.append({"command": "insert", "path": target, "insert_line": 0, "insert_text": f"{t}.{j}"})
        elif pick == 6:
            out.append({"command": "delete", "path": rng.choice(["/memories/x.txt", "/memories/dir/c.txt"])})
        elif pick == 7:
            old, new = rng.choice([("/memories/dir", "/memories/dir2"), ("/memories/dir2", "/memories/dir")])
            out.append({"command": "rename", "old_path": old, "new_path": new})
        else:
            out.append(
                {"command": "insert", "path": "/memories/shared.txt", "insert_line": 40, "insert_text": f"{t}.{j}"}
            )
    return out


@pytest.mark.parametrize("sharing", ["one tool", "a tool each", "a vault each"])
def test_all_six_commands_racing_on_overlapping_paths_match_a_sequential_replay(
    vault: Vault, vault_path: Path, key: str, sharing: str
) -> None:
    seed(VaultMemoryTool(vault, actor="seed"))
    ledger = Ledger()
    threads, per = 6, 20
    shared = VaultMemoryTool(vault, actor="shared")
    tools = {
        "one tool": [shared] * threads,
        "a tool each": [VaultMemoryTool(vault, actor=f"t{t}") for t in range(threads)],
        "a vault each": [VaultMemoryTool(Vault.open(vault_path, key=key), actor=f"t{t}") for t in range(threads)],
    }[sharing]

    if sharing == "one tool":  # one actor: the order of its commits is the order of the acknowledgements
        order_lock = threading.Lock()

        def worker(t: int) -> None:
            for call in random_calls(t, per, random.Random(t)):
                with order_lock:
                    ledger.run(tools[t], call)

    else:

        def worker(t: int) -> None:
            for call in random_calls(t, per, random.Random(t)):
                ledger.run(tools[t], call)

    run_threads(worker, threads)
    assert ledger.count() > threads * per // 3
    check_against_replay(vault, vault_path, ledger, before=len(SEED))


def test_one_shared_tool_loses_no_str_replace_or_insert(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="shared")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": "".join(f"[{n}]\n" for n in range(60))})

    def worker(t: int) -> None:
        for j in range(10):
            n = t * 10 + j
            tool.call(
                {"command": "str_replace", "path": "/memories/f.txt", "old_str": f"[{n}]", "new_str": f"[{n}] ok"}
            )
            tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": f"{t}:{j}"})

    run_threads(worker, 6)
    lines = vault.read("/memories/f.txt").splitlines()
    assert sorted(line for line in lines if ":" in line) == sorted(f"{t}:{j}" for t in range(6) for j in range(10))
    assert [line for line in lines if line.startswith("[")] == [f"[{n}] ok" for n in range(60)]
    assert commit_count(vault_path) == 1 + 120
    assert len(vault.history()) == 1 + 120
    fsck_clean(vault_path)


def test_create_racing_create_across_vault_instances_has_one_winner(vault_path: Path, key: str, vault: Vault) -> None:
    outcomes: list[str] = []
    tools = [VaultMemoryTool(Vault.open(vault_path, key=key), actor=f"t{t}") for t in range(6)]

    def worker(t: int) -> None:
        try:
            outcomes.append(tools[t].call({"command": "create", "path": "/memories/one.txt", "file_text": f"{t}"}))
        except ToolError as err:
            outcomes.append(str(err.content))

    run_threads(worker, 6)
    assert sorted(outcomes) == ["Error: File /memories/one.txt already exists"] * 5 + [
        "File created successfully at: /memories/one.txt"
    ]
    assert commit_count(vault_path) == 1
    assert vault.read("/memories/one.txt") == vault.history()[0].actor.removeprefix("t")


def test_a_folder_renamed_while_its_files_are_edited_keeps_every_acknowledged_edit(
    vault: Vault, vault_path: Path
) -> None:
    seed(VaultMemoryTool(vault, actor="seed"))
    ledger = Ledger()
    mover = VaultMemoryTool(vault, actor="mover")
    editors = [VaultMemoryTool(vault, actor=f"e{t}") for t in range(4)]
    stop = threading.Event()

    def worker(t: int) -> None:
        if t == 0:
            for n in range(30):
                old, new = ("/memories/dir", "/memories/dir2") if n % 2 == 0 else ("/memories/dir2", "/memories/dir")
                ledger.run(mover, {"command": "rename", "old_path": old, "new_path": new})
            stop.set()
            return
        j = 0
        while not stop.is_set() and j < 40:
            for folder in ("dir", "dir2"):
                ledger.run(
                    editors[t],
                    {
                        "command": "insert",
                        "path": f"/memories/{folder}/a.txt",
                        "insert_line": 0,
                        "insert_text": f"{t}.{j}",
                    },
                )
            j += 1

    run_threads(worker, 4)
    edits = [call["insert_text"] for actor, calls in ledger.acked.items() if actor != "mover" for call, _ in calls]
    where = (
        "/memories/dir/a.txt"
        if vault.listing("/memories", depth=1)[0].path == "/memories/dir"
        else "/memories/dir2/a.txt"
    )
    lines = vault.read(where).splitlines()
    assert sorted(lines[:-1]) == sorted(edits) and lines[-1] == "alpha"
    check_against_replay(vault, vault_path, ledger, before=len(SEED))


def test_a_delete_while_threads_view_answers_each_view_from_one_version(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="w")
    body = "".join(f"line {n}\n" for n in range(200))
    answers: list[str] = []
    stop = threading.Event()

    def worker(t: int) -> None:
        if t == 0:
            for _ in range(15):
                tool.call({"command": "create", "path": "/memories/d/f.txt", "file_text": body})
                tool.call({"command": "delete", "path": "/memories/d"})
            stop.set()
            return
        reader = VaultMemoryTool(vault, actor=f"r{t}")
        while not stop.is_set():
            for path in ("/memories/d/f.txt", "/memories/d"):
                try:
                    answers.append(reader.call({"command": "view", "path": path}))
                except ToolError as err:
                    assert err.content == f"The path {path} does not exist. Please provide a valid path."

    run_threads(worker, 3)
    size = f"{len(body) / 1024:.1f}K"
    full = "Here's the content of /memories/d/f.txt with line numbers:\n" + "\n".join(
        f"{n + 1:>6}\tline {n}" for n in range(200)
    )
    listing = (
        "Here're the files and directories up to 2 levels deep in /memories/d, excluding hidden items and "
        f"node_modules:\n{size}\t/memories/d\n{size}\t/memories/d/f.txt"
    )
    assert answers and all(a in (full, listing) for a in answers)
    assert commit_count(vault_path) == 30
    fsck_clean(vault_path)


# -- policies in force ---------------------------------------------------------------


def test_file_and_byte_quotas_hold_exactly_across_vault_instances(vault: Vault, vault_path: Path, key: str) -> None:
    vault.set_policy(actor="operator", max_files=12, max_vault_bytes=600)
    ledger = Ledger()
    tools = [VaultMemoryTool(Vault.open(vault_path, key=key), actor=f"t{t}") for t in range(6)]

    def worker(t: int) -> None:
        for j in range(5):
            ledger.run(tools[t], {"command": "create", "path": f"/memories/{t}/{j}.txt", "file_text": "x" * 30})
            ledger.run(
                tools[t],
                {"command": "insert", "path": f"/memories/{t}/{j}.txt", "insert_line": 1, "insert_text": "y" * 30},
            )

    run_threads(worker, 6)
    files = files_of(vault)
    assert len(files) <= 12
    assert 600 - 31 < sum(len(text.encode()) for text in files.values()) <= 600  # filled to the last write that fit
    check_against_replay_with_policy(vault, vault_path, ledger)


def check_against_replay_with_policy(vault: Vault, vault_path: Path, ledger: Ledger) -> None:
    history = list(reversed(vault.history()))
    assert len(history) == ledger.count() == commit_count(vault_path)
    queues = {actor: list(calls) for actor, calls in ledger.acked.items()}
    replay = Vault.init(vault_path.parent / "replay.vault", key=generate_key())
    try:
        replay.set_policy(actor="operator", policy=vault.policy)
        for version in history:
            call, result = queues[version.actor].pop(0)
            assert VaultMemoryTool(replay, actor=version.actor).call(call) == result
        assert files_of(replay) == files_of(vault)
    finally:
        replay.close()
    assert vault.verify().ok
    fsck_clean(vault_path)


def test_secrets_refused_from_the_moment_the_policy_changes_under_racing_writers(
    vault: Vault, vault_path: Path, key: str
) -> None:
    tools = [VaultMemoryTool(Vault.open(vault_path, key=key), actor=f"t{t}") for t in range(4)]
    secret = "sk-ant-api03-" + "A" * 80
    changed_at: list[str] = []

    def worker(t: int) -> None:
        if t == 0:
            time.sleep(0.15)
            vault.set_policy(actor="operator", secrets="refuse")
            head = vault.head()
            changed_at.append(str(head) if head is not None else "")
            return
        for j in range(25):
            try:
                tools[t].call({"command": "create", "path": f"/memories/{t}/{j}.txt", "file_text": f"key {secret}\n"})
            except ToolError as err:
                assert str(err.content).startswith("Error: Nothing was written: the text contains")

    run_threads(worker, 4)
    # Every file holding the secret was committed before the policy change was acknowledged.
    stored = [v for v in reversed(vault.history())]
    ids = [v.id for v in stored]
    if changed_at[0]:
        cut = ids.index(changed_at[0])
        assert all(v.command == "create" for v in stored[: cut + 1])
        assert stored[cut + 1 :] == []
    fsck_clean(vault_path)


def test_automatic_expiry_in_many_tools_at_once_deletes_each_file_once(vault_path: Path, key: str) -> None:
    class Clock:
        now = 1_790_000_000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    vault = Vault.init(vault_path, key=key, clock=clock)
    vault.set_policy(actor="operator", expire_after="1d")
    writer = VaultMemoryTool(vault, actor="w")
    for n in range(5):
        writer.call({"command": "create", "path": f"/memories/old{n}.txt", "file_text": "old\n"})
    clock.now += 3 * 86400
    instances = [Vault.open(vault_path, key=key, clock=clock) for _ in range(3)]
    tools = [VaultMemoryTool(instances[t % 3], actor=f"t{t}") for t in range(6)]

    def worker(t: int) -> None:
        tools[t].call({"command": "create", "path": f"/memories/new{t}.txt", "file_text": "new\n"})

    run_threads(worker, 6)
    expires = [v for v in vault.history() if v.command == "expire"]
    assert len(expires) == 1
    assert sorted(expires[0].paths) == [f"/memories/old{n}.txt" for n in range(5)]
    assert sorted(files_of(vault)) == [f"/memories/new{t}.txt" for t in range(6)]
    assert commit_count(vault_path) == 5 + 1 + 6
    fsck_clean(vault_path)


# -- undo and restore racing writes ------------------------------------------------


def test_undo_and_restore_racing_writes_never_take_back_an_unseen_write(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="w")
    tool.call({"command": "create", "path": "/memories/log.txt", "file_text": "start\n"})
    first = vault.history()[0].id
    acked: list[str] = []
    undone: list[str] = []

    def worker(t: int) -> None:
        if t == 0:
            deadline = time.monotonic() + 10
            while len(acked) < 2 and time.monotonic() < deadline:  # never the create: undo takes back writes
                time.sleep(0.001)
            attempts, deadline = 0, time.monotonic() + 30
            # 15 undos racing the writers, then on until one lands (each may be
            # refused while writes race it; once they end, an undo goes through)
            while (attempts < 15 or not undone) and time.monotonic() < deadline:
                attempts += 1
                try:
                    made = vault.undo()
                except Exception as err:  # a refused undo: something was written while it waited
                    assert "cannot undo" in str(err), err
                    continue
                if made is not None:
                    undone.append(made.id)
            return
        mine = VaultMemoryTool(vault, actor=f"t{t}")
        for j in range(15):
            mine.call({"command": "insert", "path": "/memories/log.txt", "insert_line": 1, "insert_text": f"{t}.{j}"})
            acked.append(f"{t}.{j}")

    run_threads(worker, 3)
    # Each undo took back exactly the one version before it, and nothing else.
    history = list(reversed(vault.history()))
    by_id = {v.id: n for n, v in enumerate(history)}
    assert undone
    for undo_id in undone:
        n = by_id[undo_id]
        assert vault.read("/memories/log.txt", at=undo_id) == vault.read("/memories/log.txt", at=history[n - 2].id)
    assert len(history) == 1 + len(acked) + len(undone)
    assert vault.restore(first) is not None or vault.read("/memories/log.txt") == "start\n"
    assert vault.read("/memories/log.txt") == "start\n"
    fsck_clean(vault_path)
    assert vault.verify().ok


# -- the SDK's async runner: many calls at once ------------------------------------


def test_the_async_tool_running_many_calls_at_once_loses_nothing(vault: Vault, vault_path: Path) -> None:
    tool = AsyncVaultMemoryTool(vault, actor="async")

    async def main() -> list[str]:
        await tool.call({"command": "create", "path": "/memories/f.txt", "file_text": ""})
        return list(
            await asyncio.gather(
                *(
                    tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": str(n)})
                    for n in range(60)
                )
            )
        )

    results = asyncio.run(main())
    assert results == ["The file /memories/f.txt has been edited."] * 60
    assert sorted(vault.read("/memories/f.txt").splitlines(), key=int) == [str(n) for n in range(60)]
    assert commit_count(vault_path) == 61
    fsck_clean(vault_path)


# -- close(), exceptions and Ctrl-C in the middle ------------------------------------


def test_a_thread_whose_call_raises_mid_write_leaves_the_vault_writable(vault: Vault, vault_path: Path) -> None:
    """An application's detector that raises inside the writer lock: that
    call fails, nothing is written, and every other thread goes on."""

    class Boom(Exception):
        pass

    class Exploding:
        kind = "boom"

        def find(self, text: str) -> list[Any]:
            if "boom" in text:
                raise Boom
            return []

    tool = VaultMemoryTool(vault, actor="w", policy={"secrets": "refuse"}, detectors=[Exploding()])  # type: ignore[list-item]
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": "a\n"})
    failures: list[BaseException] = []

    def worker(t: int) -> None:
        mine = VaultMemoryTool(vault, actor=f"t{t}")
        for j in range(10):
            if t == 0:
                try:
                    tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "boom"})
                except Exception as err:
                    failures.append(err)
            else:
                mine.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": f"{t}.{j}"})

    run_threads(worker, 3)
    assert len(failures) == 10
    assert "boom" not in vault.read("/memories/f.txt")
    assert commit_count(vault_path) == 1 + 20
    fsck_clean(vault_path)


CHILD = r"""
import sys
from vaultmem import Vault, VaultMemoryTool
tool = VaultMemoryTool(Vault.open(sys.argv[1]), actor="child")
tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "from the child"})
print("done")
"""


def test_ctrl_c_in_the_main_thread_while_workers_write_loses_no_acknowledged_write(
    vault: Vault, vault_path: Path, key: str
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    tool = VaultMemoryTool(vault, actor="main")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": ""})
    stop = threading.Event()
    acked: list[str] = []
    interrupted: list[str] = []

    def worker(t: int) -> None:
        mine = VaultMemoryTool(vault, actor=f"bg{t}")
        j = 0
        while not stop.is_set():
            mine.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": f"bg{t}.{j}"})
            acked.append(f"bg{t}.{j}")
            j += 1

    def interrupter() -> None:
        rng = random.Random(5)
        for _ in range(15):
            time.sleep(rng.uniform(0.003, 0.03))
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    sender = threading.Thread(target=interrupter)
    try:
        for thread in workers:
            thread.start()
        sender.start()
        j = 0
        while sender.is_alive():
            try:
                try:
                    tool.call(
                        {"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": f"m.{j}"}
                    )
                    acked.append(f"m.{j}")
                except KeyboardInterrupt:
                    interrupted.append(f"m.{j}")
            except KeyboardInterrupt:
                pass
            j += 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop.set()
        sender.join(timeout=30)
        for thread in workers:
            thread.join(timeout=30)
        signal.signal(signal.SIGINT, previous)
    assert interrupted
    lines = vault.read("/memories/f.txt").splitlines()
    assert len(lines) == len(set(lines))
    assert set(acked) <= set(lines) <= set(acked) | set(interrupted)
    assert commit_count(vault_path) == 1 + len(lines) == len(vault.history())
    # Another process still takes the writer lock: nothing was left held.
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(vault_path)],
        env={**os.environ, "VAULTMEM_KEY": key},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert child.returncode == 0, child.stderr
    assert vault.read("/memories/f.txt").startswith("from the child\n")
    fsck_clean(vault_path)
    assert vault.verify().ok


def test_processes_forked_while_a_thread_writes_and_spawned_ones_lose_nothing(
    vault: Vault, vault_path: Path, key: str
) -> None:
    tool = VaultMemoryTool(vault, actor="parent")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": ""})
    stop = threading.Event()
    acked: list[str] = []

    def background() -> None:
        mine = VaultMemoryTool(vault, actor="bg")
        j = 0
        while not stop.is_set() and j < 200:
            mine.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": f"bg.{j}"})
            acked.append(f"bg.{j}")
            j += 1

    writer = threading.Thread(target=background)
    writer.start()
    pids = []
    spawned = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(vault_path)],
        env={**os.environ, "VAULTMEM_KEY": key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for i in range(3):
            time.sleep(0.01 * (i + 1))
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 1
                try:
                    child = VaultMemoryTool(vault, actor=f"fork{i}")
                    for j in range(3):
                        child.call(
                            {
                                "command": "insert",
                                "path": "/memories/f.txt",
                                "insert_line": 0,
                                "insert_text": f"f{i}.{j}",
                            }
                        )
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        codes = []
        deadline = time.monotonic() + 30
        for pid in pids:
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            if done[0] == 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("a forked child hung")
            codes.append(os.waitstatus_to_exitcode(done[1]))
        out, err = spawned.communicate(timeout=30)
        assert out.strip() == "done"
    finally:
        stop.set()
        writer.join(timeout=30)
        if spawned.poll() is None:
            spawned.kill()
            spawned.wait()
    assert codes == [0, 0, 0] and spawned.returncode == 0, err
    lines = vault.read("/memories/f.txt").splitlines()
    expected = acked + [f"f{i}.{j}" for i in range(3) for j in range(3)] + ["from the child"]
    assert sorted(lines) == sorted(expected)
    assert commit_count(vault_path) == 1 + len(expected) == len(vault.history())
    fsck_clean(vault_path)
    assert vault.verify().ok


def test_tool_runners_in_threads_sharing_one_tool_lose_no_call(vault: Vault, vault_path: Path) -> None:
    """A server answering several conversations at once with one tool: each
    real ``tool_runner`` (its model scripted on 127.0.0.1) gets every result
    it was owed, and every call it made is one commit."""
    import anthropic

    from vaultmem.anthropic.agent import memory_request
    from vaultmem.testing.replay import ReplayServer, reply, text, tool_use

    tool = VaultMemoryTool(vault, actor="server")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": "".join(f"[{n}]\n" for n in range(20))})
    runners, turns = 4, 3
    servers = [
        ReplayServer(
            [
                *(
                    reply(
                        tool_use("insert", path="/memories/f.txt", insert_line=0, insert_text=f"{r}.{k}"),
                        tool_use("str_replace", path="/memories/f.txt", old_str=f"[{r * 5 + k}]", new_str=f"[{r}.{k}]"),
                        tool_use("create", path="/memories/once.txt", file_text=f"{r}.{k}"),
                    )
                    for k in range(turns)
                ),
                reply(text("done")),
            ]
        )
        for r in range(runners)
    ]

    def worker(r: int) -> None:
        client = anthropic.Anthropic(base_url=servers[r].url, api_key="test", max_retries=0)
        request = memory_request(tool, messages=[{"role": "user", "content": "go"}], max_tokens=256)
        runner = client.beta.messages.tool_runner(**request)
        runner.until_done()

    try:
        run_threads(worker, runners)
    finally:
        for server in servers:
            server.close()
    lines = vault.read("/memories/f.txt").splitlines()
    assert sorted(line for line in lines if not line.startswith("[")) == sorted(
        f"{r}.{k}" for r in range(runners) for k in range(turns)
    )
    for r in range(runners):
        for k in range(turns):
            assert f"[{r}.{k}]" in lines
    assert len([v for v in vault.history() if v.command == "create"]) == 2  # f.txt, and once.txt exactly once
    assert commit_count(vault_path) == 1 + runners * turns * 2 + 1
    fsck_clean(vault_path)


def test_close_while_another_thread_writes_fails_no_write(vault: Vault, vault_path: Path) -> None:
    """``close()`` (a shutdown hook, ``with Vault.open(...)``) while a
    request thread still writes: the write either lands or waits; it never
    fails half-way on a descriptor closed under it.  The closing thread is
    paused, through Python's profiler, right after it let go of the writer
    lock, and the writer right after it wrote its journal record."""
    from vaultmem.git import commits

    tool = VaultMemoryTool(vault, actor="w")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": "a\n"})
    go, at_journal, journal_closed = threading.Event(), threading.Event(), threading.Event()
    outcome: list[str] = []

    def on_step(name: str) -> None:
        if name == "journaled" and threading.current_thread().name == "writer":
            at_journal.set()
            journal_closed.wait(2)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "return" or frame.f_code.co_name != "close":
            return
        if frame.f_code.co_filename.endswith("durable.py"):  # the writer lock is closed, its mutex free
            go.set()
            at_journal.wait(2)
        elif frame.f_code.co_filename.endswith("journal.py"):
            journal_closed.set()

    def write() -> None:
        go.wait(5)
        try:
            outcome.append(
                tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "b"})
            )
        except ToolError as err:
            outcome.append(str(err.content))

    def close() -> None:
        sys.setprofile(profile)
        try:
            vault.close()
        finally:
            sys.setprofile(None)
            go.set()

    commits.on_step = on_step
    try:
        writer = threading.Thread(target=write, name="writer")
        closer = threading.Thread(target=close, name="closer")
        writer.start()
        closer.start()
        closer.join(timeout=20)
        writer.join(timeout=20)
    finally:
        commits.on_step = None
    assert outcome == ["The file /memories/f.txt has been edited."]
    assert vault.read("/memories/f.txt") == "b\na\n"
    assert commit_count(vault_path) == 2


class Timeout(Exception):
    """What a SIGALRM timeout handler raises (``signal.alarm`` per request, timeout decorators)."""


def test_a_timeout_signal_right_after_main_moved_leaves_the_vault_readable(vault: Vault, vault_path: Path) -> None:
    """An application bounds each request with ``signal.setitimer`` and a
    handler that raises.  Its alarm may go off at any instant of a write,
    here (made exact through a trace function that raises SIGALRM there)
    right after ``main`` was moved: the call is not acknowledged, but the
    vault must hold the write whole or not at all, and stay readable."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    tool = VaultMemoryTool(vault, actor="w")
    tool.call({"command": "create", "path": "/memories/f.txt", "file_text": "a\n"})
    import linecache

    from vaultmem.git import commits

    def trace(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_name != "commit" or not code.co_filename.endswith(os.path.join("git", "commits.py")):
            return None

        def lines(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and linecache.getline(code.co_filename, frame.f_lineno).strip() == "moved = True":
                signal.raise_signal(signal.SIGALRM)
            return lines

        return lines

    def alarm(signum: int, frame: Any) -> None:
        raise Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    tracing = sys.gettrace()
    sys.settrace(trace)
    try:
        with pytest.raises(Timeout):
            tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "b"})
    finally:
        sys.settrace(tracing)
        signal.signal(signal.SIGALRM, previous)
    assert commits.on_step is None
    fsck_clean(vault_path)
    assert vault.read("/memories/f.txt") in ("a\n", "b\na\n")
    assert len(vault.history()) == commit_count(vault_path)
    tool.call({"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "c"})
    assert vault.verify().ok


def _child_work(_: object) -> None:  # pragma: no cover - never reached: the argument cannot be sent
    pass


@pytest.mark.parametrize("what", ["vault", "tool", "async tool"])
def test_sending_a_vault_or_tool_to_a_spawned_process_says_what_to_do_instead(vault: Vault, what: str) -> None:
    """multiprocessing's spawn (and forkserver, a process pool) pickles the
    arguments: a vault or tool refuses with how to open it in the other
    process, not Python's ``cannot pickle '_thread.lock' object``."""
    import multiprocessing

    sent = {
        "vault": vault,
        "tool": VaultMemoryTool(vault, actor="a"),
        "async tool": AsyncVaultMemoryTool(vault, actor="a"),
    }[what]
    process = multiprocessing.get_context("spawn").Process(target=_child_work, args=(sent,))
    with pytest.raises(TypeError) as info:
        process.start()
    message = str(info.value)
    assert message.startswith(f"This {type(sent).__name__} cannot be sent to another process (pickled)")
    assert "Vault.open(path, key=...)" in message
    assert "_thread" not in message
    assert vault.history() == []  # and the vault is as it was
