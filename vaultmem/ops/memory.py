"""``memory_20250818``'s six commands on top of a vault: every exact string
Claude sees (SPEC.md).  Knows nothing about git or the Anthropic SDK: it
reads snapshots, hands the vault a :class:`~vaultmem.repo.store.Change` to
commit, and refuses with :class:`~vaultmem.errors.CommandError`, whose
message is the tool result.  The SDK's tool classes
(:mod:`vaultmem.anthropic.tool`) and any other client run them through
:meth:`MemoryCommands.run`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from vaultmem.core import paths, text
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import Policy
from vaultmem.core.values import is_int, is_unicode
from vaultmem.errors import CommandError, IntegrityError, InvalidPathError, VaultError
from vaultmem.git.snapshot import Listed, Snapshot
from vaultmem.ops.autosync import AutoSync
from vaultmem.ops.autosync import log as sync_log
from vaultmem.ops.guard import POLICY_ATTEMPTS, Guard, PolicyChanged, counted
from vaultmem.repo.engine import _check_label
from vaultmem.repo.store import Change, Store

if TYPE_CHECKING:
    from vaultmem.core.detectors import Detector, Match

DEFAULT_VIEW_CAP = 16_000

_STR = "string"
_INT = "integer"
_RANGE = "view_range"
# command -> {parameter: (type, required)}
_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "view": {"path": (_STR, True), "view_range": (_RANGE, False)},
    "create": {"path": (_STR, True), "file_text": (_STR, True)},
    "str_replace": {"path": (_STR, True), "old_str": (_STR, True), "new_str": (_STR, True)},
    "insert": {"path": (_STR, True), "insert_line": (_INT, True), "insert_text": (_STR, True)},
    "delete": {"path": (_STR, True)},
    "rename": {"old_path": (_STR, True), "new_path": (_STR, True)},
}


_STORAGE_ERROR = (
    "Error: the memory store could not complete the command because of a storage error on the "
    "host; nothing was changed. Try again later or ask the operator to check the vault."
)


def _fail(message: str) -> CommandError:
    return CommandError(message)


# What an error repeats of the model's own input, at most (characters): the
# model sent it and does not need it back whole, and a 5 MB echo would cost a
# turn's context as an uncapped view would.  Shorter input is echoed exactly.
ECHO_CAP = 1_000


def _echo(text: str) -> str:
    """``text`` as an error repeats it: whole up to ``ECHO_CAP`` characters,
    else its start and how long it was.  A lone surrogate (what Python makes
    of a byte that is not UTF-8) is shown as its escape, ``\\ud800``, so the
    message stays text the SDK can send and a terminal can print."""
    if not is_unicode(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= ECHO_CAP:
        return text
    return f"{text[:ECHO_CAP]}... [{len(text):,} characters in all; the first {ECHO_CAP:,} shown]"


def _number(n: int) -> str:
    """An integer as an error repeats it: one with more digits than Python
    turns into text (4,300), or than an error should repeat, by its size."""
    if n.bit_length() <= 3 * ECHO_CAP:  # at most ~900 digits
        return str(n)
    return f"{'-' if n < 0 else ''}<an integer of over {ECHO_CAP * 9 // 10:,} digits>"


LINES_CAP = 100  # line numbers an error lists at most


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:LINES_CAP]))
    return shown if len(numbers) <= LINES_CAP else f"{shown}, ... [{len(numbers):,} in all]"


def _type_name(value: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def parse_input(raw: object) -> dict[str, Any]:
    """Check a tool input against the command's parameters; a clear error for
    an unknown command, a missing, mistyped or unexpected parameter."""
    if hasattr(raw, "model_dump"):
        # A typed SDK command: its values are checked below, as a dict's are,
        # without pydantic warning on stderr about a value of the wrong type.
        raw = raw.model_dump(exclude_none=True, warnings=False)
    if not isinstance(raw, Mapping):
        raise _fail("Error: the memory tool input must be a JSON object with a `command` field.")
    command = raw.get("command")
    if command is None:
        raise _fail(f"Error: Missing required parameter `command`. Use one of: {', '.join(_SCHEMA)}.")
    if not isinstance(command, str) or command not in _SCHEMA:
        shown = f"`{_echo(command)}`" if isinstance(command, str) else _type_name(command)
        raise _fail(f"Error: Unknown command {shown}. Use one of: {', '.join(_SCHEMA)}.")
    schema = _SCHEMA[command]
    for name in raw:
        if name != "command" and name not in schema:
            raise _fail(
                f"Error: Unexpected parameter `{_echo(str(name))}` for command `{command}`. "
                f"It takes: {', '.join(f'`{p}`' for p in schema)}."
            )
    params: dict[str, Any] = {"command": command}
    for name, (kind, required) in schema.items():
        value = raw.get(name)
        if value is None:
            if required:
                raise _fail(f"Error: Missing required parameter `{name}` for command `{command}`.")
            continue
        if kind == _STR and not isinstance(value, str):
            raise _fail(f"Error: Parameter `{name}` must be a string, got {_type_name(value)}.")
        if kind == _STR and not is_unicode(value):
            raise _fail(
                f"Error: Parameter `{name}` is not valid Unicode text (it contains a lone surrogate, such as "
                "a byte that is not UTF-8); nothing was done. Send it as UTF-8 text."
            )
        if kind == _INT and not is_int(value):
            raise _fail(f"Error: Parameter `{name}` must be an integer, got {_type_name(value)}.")
        if kind == _RANGE and not (
            isinstance(value, (list, tuple)) and len(value) == 2 and all(is_int(v) for v in value)
        ):
            raise _fail(
                "Error: Parameter `view_range` must be a list of two integers [start, end] "
                "(end may be -1 for the end of the file)."
            )
        params[name] = value
    return params


class MemoryCommands:
    """The six commands, run against one vault.  Shared by the sync and async tools."""

    def __init__(
        self,
        vault: Store,
        *,
        actor: str,
        session: str | None,
        max_file_bytes: int | None = None,
        view_cap: int = DEFAULT_VIEW_CAP,
        policy: Policy | Mapping[str, Any] | None = None,
        detectors: Iterable[Detector] = (),
        sync: str | None = None,
        sync_every: float | None = None,
    ) -> None:
        if max_file_bytes is not None and (not is_int(max_file_bytes) or max_file_bytes < 1):
            raise VaultError("Error: max_file_bytes must be a positive integer.")
        if not is_int(view_cap) or view_cap < 100:
            raise VaultError("Error: view_cap must be an integer of at least 100 characters.")
        self.vault = vault
        self.actor = actor
        self.session = session
        self.guard = Guard(vault, policy, detectors, max_file_bytes)
        self.view_cap = view_cap
        # Automatic sync with a git server (docs/sync.md): pulls now, pushes after each mutation.
        # Without sync=, the policy's sync_remote (and sync_every) says whether, and with which remote.
        if sync is None:
            try:
                policy_now = self.guard.policy()
            except IntegrityError:  # a damaged policy refuses writes, not reads: each write says why
                policy_now = Policy()  # so no automatic sync either
            sync = policy_now.sync_remote
            if sync_every is None:
                sync_every = policy_now.sync_every
            if sync is not None and not any(r.name == sync for r in vault.remotes):
                sync_log.warning(
                    "vaultmem: the policy asks for automatic sync with %r, which this clone has no remote "
                    "for; the memory works locally (add the remote to sync)",
                    sync,
                )
                sync = None
        self.autosync = AutoSync(vault, sync, sync_every, actor) if sync is not None else None
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "view": self.view,
            "create": self.create,
            "str_replace": self.str_replace,
            "insert": self.insert,
            "delete": self.delete,
            "rename": self.rename,
        }

    @property
    def max_file_bytes(self) -> int:
        """The per-file limit in force (the application's, else the vault policy's)."""
        return self.guard.policy().max_file_bytes

    def run(self, raw: object) -> str:
        params = parse_input(raw)
        self.guard.maybe_expire(self.session)
        try:
            for attempt in range(POLICY_ATTEMPTS):
                try:
                    result = self._handlers[params["command"]](params)
                    break
                except PolicyChanged:  # checked against a policy no longer in force: again, under the new one
                    if attempt + 1 == POLICY_ATTEMPTS:
                        raise _fail(
                            "Error: the vault's policy kept changing while this command waited; nothing was "
                            "written. Try again."
                        ) from None
        except CommandError:
            raise
        except VaultError as err:
            raise _fail(str(err)) from err
        except OSError as err:
            raise _fail(_STORAGE_ERROR) from err
        if self.autosync is not None and params["command"] != "view":
            self.autosync.poke()  # acknowledged: push it in the background
        return result

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def _path(params: dict[str, Any], name: str = "path", *, new: bool = False) -> MemoryPath:
        """The path parameter ``name``; ``new`` when it names something the
        command makes (create, a move's destination), to which every rule for
        new names applies."""
        try:
            return paths.parse(params[name], existing=not new)
        except InvalidPathError as err:
            raise _fail(f"Error: Invalid `{name}`: {err.rule}. Use a path such as /memories/notes.txt.") from err

    @staticmethod
    def _kind(snap: Snapshot, path: MemoryPath) -> str | None:
        kind = snap.kind(path)
        if kind == "file" and path.dir_hint:
            return None  # "x/" names a directory; there is none
        return kind

    @staticmethod
    def _read(snap: Snapshot, path: MemoryPath, shown: str) -> str:
        """A file's text; a clear refusal for bytes that are not UTF-8, which
        only a program writing through the Python API can have stored."""
        try:
            return snap.read_text(path)
        except UnicodeDecodeError as err:
            raise _fail(
                f"Error: The file {shown} holds bytes that are not UTF-8 text (another program stored them), so "
                "the memory tool cannot show or edit it. Delete it, or rename it, and create a new file instead."
            ) from err

    def _encode(self, shown: str, content: str, limit: int, had: int = 0) -> bytes:
        """The file's bytes, refused over ``limit`` unless no larger than the
        ``had`` bytes it holds now (a file over a lowered limit can always be
        shortened)."""
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as err:
            raise _fail(
                "Error: the text is not valid Unicode (it contains a lone surrogate); nothing was written."
            ) from err
        if len(data) > max(limit, had):
            raise _fail(
                f"Error: File {shown} would be {counted(len(data), 'byte')}; the limit is {counted(limit, 'byte')} "
                "per file. Nothing was written. Keep the file shorter or split it into several files."
            )
        if text.count_lines(content) > text.MAX_LINES:
            raise _fail(
                f"Error: File {shown} would exceed the maximum line limit of 999,999 lines. Nothing was written; "
                "split it into several files."
            )
        return data

    def _commit(self, build: Callable[[Snapshot], Change]) -> None:
        self.vault.mutate(build, actor=self.actor, session=self.session)

    # -- commands ----------------------------------------------------------

    def view(self, params: dict[str, Any]) -> str:
        shown: str = params["path"]
        path = self._path(params)
        snap = self.vault.snapshot()
        kind = self._kind(snap, path)
        if kind is None:
            raise _fail(f"The path {shown} does not exist. Please provide a valid path.")
        if kind == "dir":
            if "view_range" in params:
                raise _fail(
                    f"Error: `view_range` only applies to files and {shown} is a directory; "
                    "view it without `view_range`."
                )
            return self._view_dir(snap, path, shown)
        result = self._view_file(snap, path, shown, params.get("view_range"))
        self.vault.reads.note([path.text], self.vault.clock())
        return result

    def _view_dir(self, snap: Snapshot, path: MemoryPath, shown: str) -> str:
        base = shown[:-1] if shown.endswith("/") and len(shown) > 1 else shown
        out = [
            f"Here're the files and directories up to 2 levels deep in {shown}, "
            "excluding hidden items and node_modules:",
            f"{text.format_size(snap.size(path))}\t{shown}",
        ]
        used = len(out[1])
        entries = snap.listing(path)

        def shown_path(entry: Listed) -> str:
            return f"{base}/" + "/".join(entry.path.parts[len(path.parts) :])

        for index, entry in enumerate(entries):
            line = f"{text.format_size(entry.size)}\t{shown_path(entry)}" + ("/" if entry.kind == "dir" else "")
            if used + len(line) + 1 > self.view_cap:
                out.append(self._listing_cut(entries, index, path, shown_path))
                break
            out.append(line)
            used += len(line) + 1
        return "\n".join(out)

    def _listing_cut(
        self, entries: list[Listed], index: int, path: MemoryPath, shown_path: Callable[[Listed], str]
    ) -> str:
        """The last line of a listing cut before ``entries[index]``: the
        subdirectory to view for the rest, and, for the files directly in the
        folder listed that are past the cut (which no narrower view lists),
        how many there are and the next of them by name."""
        cut = f"[Listing cut at {self.view_cap:,} characters after {index} of {len(entries)} entries; "
        depth = len(path.parts) + 1
        first = entries[index]
        # Inside a subdirectory: view that one, from its start; else the next one.
        inside = [
            e for e in entries[:index] if len(first.path.parts) > depth and e.path.parts == first.path.parts[:depth]
        ]
        folders = inside + [e for e in entries[index:] if e.kind == "dir"]
        direct = [e for e in entries[index:] if e.kind == "file" and len(e.path.parts) == depth]
        if folders and direct:
            return cut + (
                f"view a subdirectory such as {shown_path(folders[0])} to see the rest of it. {len(direct)} "
                f"{'file' if len(direct) == 1 else 'files'} directly in {shown_path(direct[0]).rsplit('/', 1)[0]} "
                f"{'is' if len(direct) == 1 else 'are'} past the cut too, from {shown_path(direct[0])} on, and no "
                "view of a subdirectory lists them.]"
            )
        if folders:
            return cut + f"view a subdirectory such as {shown_path(folders[0])} to see the rest.]"
        return cut + (
            f"the other {len(entries) - index} are files directly in {shown_path(first).rsplit('/', 1)[0]}, "
            f"from {shown_path(first)} on, and no view of a subdirectory lists them.]"
        )

    def _view_file(self, snap: Snapshot, path: MemoryPath, shown: str, view_range: list[int] | None) -> str:
        content = self._read(snap, path, shown)
        lines = text.split_lines(content)
        total = len(lines)
        if total > text.MAX_LINES:
            raise _fail(f"File {shown} exceeds maximum line limit of 999,999 lines.")
        header = f"Here's the content of {shown} with line numbers:"
        start, end = 1, -1
        if view_range is not None:
            start, end = int(view_range[0]), int(view_range[1])
            if total == 0:
                raise _fail(
                    f"Error: Invalid `view_range` parameter: [{_number(start)}, {_number(end)}]. "
                    f"The file {shown} is empty (0 lines); "
                    "view it without `view_range`."
                )
            if not (1 <= start <= total) or not (end == -1 or start <= end <= total):
                raise _fail(
                    f"Error: Invalid `view_range` parameter: [{_number(start)}, {_number(end)}]. "
                    "It should be within the range of lines "
                    f"of the file: [1, {total}]; `end` may be -1 to read to the end of the file."
                )
        last = total if end == -1 else end
        selected = lines[start - 1 : last]
        if not selected:
            return header
        if view_range is not None and len(selected) == 1:
            # One line asked for alone is shown whole, however long: the
            # only way to read a line longer than the cap (a file is at most
            # max_file_bytes).
            rendered, covered = [text.numbered(start, selected[0])], 1
        else:
            rendered, covered = text.capped_lines(selected, start, self.view_cap)
        body = header + "\n" + "\n".join(rendered)
        if covered < len(selected):
            shown_last = start + covered - 1
            body += (
                f"\n[Output cut at {self.view_cap:,} characters: showing lines {start}-{shown_last} of {total}. "
                f"To read on, view {shown} with view_range [{shown_last + 1}, {end}].]"
            )
        return body

    def create(self, params: dict[str, Any]) -> str:
        shown: str = params["path"]
        path = self._path(params, new=True)
        if path.is_root:
            raise _fail(
                "Error: Cannot create /memories itself; it is the memory directory. Give a file path inside it."
            )
        if path.dir_hint:
            raise _fail(f"Error: {shown} ends with '/', which names a directory; give a file path without it.")
        policy = self.guard.policy()
        self.guard.check_path(policy, path)
        stored, redacted = self.guard.filter_text(policy, params["file_text"])
        data = self._encode(shown, stored, policy.max_file_bytes)

        def build(snap: Snapshot) -> Change:
            self.guard.confirm(policy)
            if snap.kind(path) is not None:
                raise _fail(f"Error: File {shown} already exists")
            blocker = snap.file_above(path)
            if blocker is not None:
                raise _fail(f"Error: Cannot create {shown}: {blocker} is a file, not a directory.")
            self.guard.check_quota(policy, snap, 0, len(data), new_file=True)
            return Change("create", (path,)).write(path, data)

        self._commit(build)
        return f"File created successfully at: {shown}" + self.guard.redaction_note(redacted)

    def str_replace(self, params: dict[str, Any]) -> str:
        shown: str = params["path"]
        path = self._path(params)
        old: str = params["old_str"]
        if old == "":
            raise _fail("Error: `old_str` is empty. Give the exact text to replace; it must appear once in the file.")
        policy = self.guard.policy()
        new, redacted = self.guard.filter_text(policy, params["new_str"])
        joined: list[Match] = []  # what the edit completed in the file
        snippet: list[str] = []

        def build(snap: Snapshot) -> Change:
            self.guard.confirm(policy)
            if self._kind(snap, path) != "file":
                raise _fail(f"Error: The path {shown} does not exist. Please provide a valid path.")
            content = self._read(snap, path, shown)
            where = text.match_lines(content, old)
            if not where:
                raise _fail(f"No replacement was performed, old_str `{_echo(old)}` did not appear verbatim in {shown}.")
            if len(where) > 1:
                raise _fail(
                    f"No replacement was performed. Multiple occurrences of old_str `{_echo(old)}` in lines: "
                    f"{_lines(where)}. Please ensure it is unique"
                )
            pos = content.find(old)
            updated, joined[:] = self.guard.filter_edit(
                policy, content, content[:pos] + new + content[pos + len(old) :]
            )
            data = self._encode(shown, updated, policy.max_file_bytes, snap.size(path))
            self.guard.check_quota(policy, snap, snap.size(path), len(data), new_file=False)
            first = where[0]
            last = first + new.count("\n") - (1 if new.endswith("\n") and new else 0)
            snippet[:], shown_last, edit_last = text.edit_snippet(text.split_lines(updated), first, last, self.view_cap)
            if shown_last < edit_last:
                snippet.append(
                    f"[Snippet cut at {self.view_cap:,} characters: the edit covers lines {first}-{edit_last} and "
                    f"lines {shown_last + 1}-{edit_last} are not shown. To see them, view {shown} with view_range "
                    f"[{shown_last + 1}, {edit_last}].]"
                )
            return Change("str_replace", (path,)).write(path, data)

        self._commit(build)
        result = "The memory file has been edited."
        if snippet:
            result += " Here is the snippet showing the change (with line numbers):\n" + "\n".join(snippet)
        return result + self.guard.redaction_note(redacted + joined)

    def insert(self, params: dict[str, Any]) -> str:
        shown: str = params["path"]
        path = self._path(params)
        line: int = params["insert_line"]
        policy = self.guard.policy()
        addition, redacted = self.guard.filter_text(policy, params["insert_text"])
        joined: list[Match] = []  # what the insert completed in the file

        def build(snap: Snapshot) -> Change:
            self.guard.confirm(policy)
            if self._kind(snap, path) != "file":
                raise _fail(f"Error: The path {shown} does not exist")
            content = self._read(snap, path, shown)
            total = text.count_lines(content)
            if not 0 <= line <= total:
                raise _fail(
                    f"Error: Invalid `insert_line` parameter: {_number(line)}. It should be within the range of lines "
                    f"of the file: [0, {total}]"
                )
            updated, joined[:] = self.guard.filter_edit(policy, content, text.insert_text(content, line, addition))
            data = self._encode(shown, updated, policy.max_file_bytes, snap.size(path))
            self.guard.check_quota(policy, snap, snap.size(path), len(data), new_file=False)
            return Change("insert", (path,)).write(path, data)

        self._commit(build)
        return f"The file {shown} has been edited." + self.guard.redaction_note(redacted + joined)

    def delete(self, params: dict[str, Any]) -> str:
        shown: str = params["path"]
        path = self._path(params)
        if path.is_root:
            raise _fail("Error: Cannot delete /memories itself. Delete the files and folders inside it instead.")
        self.guard.policy()  # a damaged policy refuses every write

        def build(snap: Snapshot) -> Change:
            if self._kind(snap, path) is None:
                raise _fail(f"Error: The path {shown} does not exist")
            return Change("delete", (path,)).delete(path)

        self._commit(build)
        return f"Successfully deleted {shown}"

    def clear(self) -> str:
        """Delete everything under ``/memories``, hidden files included, as
        one ``delete`` commit (no commit when it is already empty): the SDK's
        ``clear_all_memory``, with its result string.  History keeps it all."""
        root = MemoryPath(())

        def build(snap: Snapshot) -> Change:
            children = tuple(entry.path for entry in snap.listing(root, depth=1, hidden=True))
            change = Change("delete", children or (root,))
            for child in children:
                change.delete(child)
            return change

        try:
            self.guard.policy()  # a damaged policy refuses every write
            made = self.vault.mutate(build, actor=self.actor, session=self.session, skip_if_unchanged=True)
        except CommandError:
            raise
        except VaultError as err:
            raise _fail(str(err)) from err
        except OSError as err:
            raise _fail(_STORAGE_ERROR) from err
        if made is not None and self.autosync is not None:
            self.autosync.poke()
        return "All memory cleared"

    @staticmethod
    def _check_moved_lengths(snap: Snapshot, old: MemoryPath, new: MemoryPath, refusal: str) -> None:
        """A folder's files keep their names below the new one: none may get a
        path longer than any path may be, or the tool could not name it again."""
        grows = len(new.text.encode("utf-8")) - len(old.text.encode("utf-8"))
        if grows <= 0:
            return
        longest = max((len(moved.text.encode("utf-8")) for moved, _ in snap.files(old)), default=0) + grows
        if longest > paths.MAX_PATH_BYTES:
            raise _fail(
                f"{refusal}: a file below it would get a path of {longest:,} bytes, over the limit of "
                f"{paths.MAX_PATH_BYTES:,} bytes. Choose a shorter new path."
            )

    def rename(self, params: dict[str, Any]) -> str:
        old_shown: str = params["old_path"]
        new_shown: str = params["new_path"]
        old = self._path(params, "old_path")
        new = self._path(params, "new_path", new=True)

        def build(snap: Snapshot) -> Change:
            kind = self._kind(snap, old)
            if kind is None:
                raise _fail(f"Error: The path {old_shown} does not exist")
            if snap.kind(new) is not None:
                raise _fail(f"Error: The destination {new_shown} already exists")
            self.guard.check_path(self.guard.policy(), new)
            if old.is_root:
                raise _fail("Error: Cannot rename /memories itself. Rename the files and folders inside it instead.")
            if kind == "dir" and new.is_within(old):  # below a file is refused as such, further down
                raise _fail(f"Error: Cannot move {old_shown} into itself ({new_shown} is inside it).")
            if kind == "file" and new.dir_hint:
                raise _fail(
                    f"Error: {new_shown} ends with '/', which names a directory; give the new file path without it."
                )
            blocker = snap.file_above(new)
            if blocker is not None:
                raise _fail(f"Error: Cannot rename to {new_shown}: {blocker} is a file, not a directory.")
            if kind == "dir":
                self._check_moved_lengths(snap, old, new, f"Error: Cannot rename {old_shown} to {new_shown}")
            policy = self.guard.policy()
            if kind == "dir" and policy.secrets != "off":  # a moved file's path joins the new name to names inside
                for moved, _ in snap.files(old):
                    self.guard.check_path(policy, MemoryPath(new.parts + moved.parts[len(old.parts) :]))
            return Change("rename", (old, new)).move(old, new)

        self._commit(build)
        return f"Successfully renamed {old_shown} to {new_shown}"


def check_who(actor: str, session: str | None) -> None:
    """Refuse, as VaultError, an actor or session name git cannot record in a
    commit (empty, over 200 characters, ``<``, ``>``, a control character,
    not UTF-8): what an application checks once, when it makes its tool."""
    _check_label("actor", actor)
    _check_label("session", session, optional=True)


def new_session() -> str:
    """A random session id, ``sess-`` and 12 hex digits (a tool given none gets one)."""
    return "sess-" + secrets.token_hex(6)
