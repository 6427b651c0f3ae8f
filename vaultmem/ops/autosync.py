"""Automatic sync for agents: a memory tool that keeps its vault in step with a
git server, off the calls' latency and offline first.

At session start (when the tool is made) it pulls, in the background thread:
the tool waits for that pull at most ``FIRST_PULL_WAIT`` seconds, then works
while it finishes; what this vault holds that the server lacked (versions
an earlier session could not push) is pushed right after.  When another clone has pushed first, the push pulls
(merging both sides' versions, as the tool's actor) and pushes again, a
bounded number of times, without waiting for the next mutation.  After each acknowledged
mutation it pushes, in a background thread, within ``GAP`` (1 s; the
mutations of that second go in one push), and with ``every`` it also pulls
and pushes every that many seconds.  A server that cannot be reached, or a
history that cannot be sent or taken as it is, never fails a tool call: the
call works locally, the next sync catches up, and a warning is logged on the
``vaultmem.sync`` logger.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from vaultmem.core.policy import MAX_DURATION
from vaultmem.errors import ConflictError, VaultError
from vaultmem.repo.remotes import unpushed
from vaultmem.repo.store import Store

log = logging.getLogger("vaultmem.sync")

# Seconds a push waits after the mutation that asked for it: the mutations
# of a burst go in one push, and a push (a fetch, a pack, a write to the
# server) does not compete with every call for the machine.
GAP = 1.0

# Seconds the tool's constructor waits for the pull that starts its session.
# Every network step is bounded too (VAULTMEM_SYNC_TIMEOUT, 30 s by default):
# a server that never answers ends the pull with a warning.
FIRST_PULL_WAIT = 5.0

# Pushes tried after another clone's push landed first (each after pulling it).
PUSH_TRIES = 3

# Rounds of PUSH_TRIES tried again, GAP apart, when every push of a round lost
# its race to another clone's: the acknowledged versions reach the server
# without waiting for the next mutation (an agent that has stopped writing, a
# tool being closed), and the retries still end.
RACE_ROUNDS = 3


class AutoSync:
    """Keeps ``vault`` in step with ``remote`` (see the module docstring)."""

    def __init__(self, vault: Store, remote: str, every: float | None = None, actor: str = "vaultmem") -> None:
        if not any(r.name == remote for r in vault.remotes):
            raise VaultError(f"Error: the vault has no remote named {remote!r}; add it before syncing with it.")
        if every is not None and (
            isinstance(every, bool)
            or not isinstance(every, int | float)
            or not 0 < every <= MAX_DURATION  # NaN and inf too: the sync thread could never wait for them
        ):
            raise VaultError(
                "Error: the sync interval (sync_every) must be a positive number of seconds, at most 100 years."
            )
        self.vault = vault
        self.remote = remote
        self.every = every
        self.actor = actor  # the author of the merges this tool makes
        self.failures = 0  # syncs that logged a warning, for the tool's owner
        self._raced = False  # the last push lost every race of its round
        self._rounds = 0  # rounds retried after lost races, in a row
        self._wake = threading.Condition()
        self._dirty = False
        self._closed = False
        self._flushing = 0
        self._thread: threading.Thread | None = None
        # The session starts from what the server holds: the first pull runs in
        # the thread, and the tool waits for it a bounded time only.
        self._first_pull = True
        self._busy = True  # flush() waits for it
        self._start()
        with self._wake:
            self._wake.wait_for(lambda: not self._first_pull, FIRST_PULL_WAIT)
            pending = self._first_pull
        if pending:
            log.warning(
                "vaultmem: the pull from %r has not finished after %g s; the memory works locally meanwhile",
                remote,
                FIRST_PULL_WAIT,
            )

    def poke(self) -> None:
        """A mutation was acknowledged: push it soon, in the background."""
        with self._wake:
            self._rounds = 0  # a new mutation: its push gets its own rounds after lost races
            if not self._dirty:  # already due: waking the thread again would only cost the call a switch
                self._dirty = True
                self._wake.notify()
        self._start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything acknowledged so far has been tried; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._wake:
            self._flushing += 1  # the thread need not wait out the gap between pushes
            self._wake.notify_all()
            try:
                while self._dirty or self._busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._wake.wait(left)
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Try to push what is left, then stop the thread."""
        self.flush(timeout)
        with self._wake:
            self._closed = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _start(self) -> None:
        with self._wake:
            if self._closed or self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="vaultmem-sync", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        if self._first_pull:
            behind = False
            try:
                if self._attempt(pull=True, push=False):
                    # versions an earlier session could not push (the server was
                    # down then) go now, not only after this session's first write
                    with contextlib.suppress(Exception):  # a push would say what is wrong
                        behind = unpushed(self.vault.path, self.remote)
            finally:
                with self._wake:
                    if behind:
                        self._dirty = True
                    self._first_pull = self._busy = False
                    self._wake.notify_all()
                    done = self.every is None and not self._dirty
                    if done:
                        self._thread = None  # under the lock: a poke after this starts a new thread
            if done:
                return
        while True:
            with self._wake:
                if not self._dirty and not self._closed:
                    self._wake.wait(self.every)
                if self._dirty:
                    # Let the burst this mutation belongs to gather: the push goes
                    # GAP seconds after it (pokes do not cut that short; flush() and
                    # close() do), so one push carries a burst and never competes
                    # with its calls.
                    end = time.monotonic() + GAP
                    while not self._closed and not self._flushing and (left := end - time.monotonic()) > 0:
                        self._wake.wait(left)
                if self._closed and not self._dirty:
                    self._thread = None
                    return
                periodic, self._dirty, self._busy = not self._dirty, False, True
            done = False
            try:
                done = self._attempt(pull=periodic, push=True)
            finally:
                with self._wake:
                    if done or not self._raced:
                        self._rounds = 0
                    elif self._rounds < RACE_ROUNDS:
                        # other clones kept pushing first: this one tries again (flush() waits for it)
                        self._rounds += 1
                        self._dirty = True
                    self._busy = False
                    self._wake.notify_all()
            if self.every is None:
                with self._wake:
                    if not self._dirty:
                        self._thread = None  # under the lock: a poke after this starts a new thread
                        return

    def _attempt(self, *, pull: bool, push: bool) -> bool:
        """One sync; False when it failed (and logged a warning)."""
        self._raced = False
        try:
            if pull:
                self.vault.pull(self.remote, actor=self.actor)
            for tries_left in range(PUSH_TRIES - 1, -1, -1) if push else ():
                try:
                    self.vault.push(self.remote)
                    break
                except ConflictError:  # another clone pushed first: merge its versions, then push
                    if not tries_left:
                        self._raced = True
                        raise
                    self.vault.pull(self.remote, actor=self.actor)
        except VaultError as err:
            self.failures += 1
            again = "tries again" if self._raced and self._rounds < RACE_ROUNDS else "tries again at the next sync"
            log.warning(
                "vaultmem: could not sync with %r; the memory works locally and %s: %s", self.remote, again, err
            )
            return False
        except Exception as err:  # never let a sync bug reach a tool call; say it
            self.failures += 1
            log.warning("vaultmem: sync with %r failed unexpectedly: %r", self.remote, err)
            return False
        return True
