"""``vaultmem demo``: a support agent's session with a vault as its memory, offline.

The Anthropic SDK client and its tool runner run for real, against a
:class:`~vaultmem.replay.ReplayServer` on 127.0.0.1 that plays Claude's
recorded turns; the vault, its encryption and its git history are real too.
The session follows the memory tool's documented workflow: check the memory
first, read the guidelines, record a customer's preference, edit it, clean up.
Afterwards the demo shows what an auditor and an operator see: the audit log,
the decrypted changes, the ciphertext at rest, a restore, and ``verify``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from vaultmem.anthropic.agent import DEFAULT_MODEL, converse, describe_call, memory_request, result_text
from vaultmem.cli.render import log_lines
from vaultmem.errors import AlreadyExistsError, VaultError
from vaultmem.testing.replay import Conversation, ReplayServer, Reply, reply, text, tool_use

ACTOR = "support-bot"
SESSION = "ticket-4411"
OPERATOR = "operator"
GUIDELINES = "/memories/customer_service_guidelines.xml"
DRAFT = "/memories/drafts/ticket-4411-reply.txt"
CUSTOMER = "/memories/customers/ada_lovelace.xml"
SHOWN_LINES = 12  # a tool result longer than this is cut in the printed conversation

GUIDELINES_TEXT = """<guidelines>
<addressing_customers>
- Always address customers by their first name
- Use empathetic language
</addressing_customers>
<memory>
- Record each customer's contact preferences under /memories/customers/
- Remove drafts once a ticket is closed
</memory>
<refunds>
- Approved refunds reach the customer within 5 business days
</refunds>
</guidelines>
"""
DRAFT_TEXT = "Dear Ada, we are sorry your refund is late. It was approved on 18 November.\n"
CUSTOMER_TEXT = """<customer>
<name>Ada Lovelace</name>
<contact>e-mail only</contact>
<open_ticket>4411: refund not received</open_ticket>
</customer>
"""

USER_TURNS = [
    "Hi, this is Ada Lovelace about ticket #4411: my refund still hasn't arrived. "
    "And please only contact me by e-mail from now on.",
    "It arrived this morning, thank you! You can close the ticket. Mornings are best if you need me.",
]


def _mentions(conversation: Conversation, needle: str) -> bool:
    return any(needle in result.content for result in conversation.tool_results())


def script() -> list[Reply | Callable[[Conversation], Reply]]:
    """Claude's side of the session, turn by turn (the first four answer the
    first user message, the rest the second)."""
    return [
        reply(
            text("I'll check my memory for earlier context first."),
            tool_use("view", path="/memories"),
        ),
        lambda c: reply(
            text("There are support guidelines; let me read them." if _mentions(c, GUIDELINES) else "Nothing yet."),
            tool_use("view", path=GUIDELINES),
        ),
        reply(
            text("The guidelines ask me to record contact preferences. Saving Ada's."),
            tool_use("create", path=CUSTOMER, file_text=CUSTOMER_TEXT),
        ),
        reply(
            text(
                "Thank you, Ada. I've noted that we contact you by e-mail only. Approved refunds arrive "
                "within 5 business days, and yours was approved on 18 November, so it should reach you "
                "by 25 November. I'll e-mail you if it doesn't."
            )
        ),
        reply(
            text("Glad it arrived! Updating your record."),
            tool_use(
                "str_replace",
                path=CUSTOMER,
                old_str="<contact>e-mail only</contact>",
                new_str="<contact>e-mail only, mornings</contact>",
            ),
            tool_use(
                "str_replace",
                path=CUSTOMER,
                old_str="<open_ticket>4411: refund not received</open_ticket>\n",
                new_str="",
            ),
        ),
        reply(
            text("The guidelines say to remove drafts once a ticket is closed."),
            tool_use("delete", path="/memories/drafts/ticket-4411.txt"),
        ),
        lambda c: reply(
            text("Wrong name; let me look." if any(r.is_error for r in c.tool_results()) else "Let me look."),
            tool_use("view", path="/memories/drafts"),
        ),
        reply(tool_use("delete", path=DRAFT)),
        reply(text("Done: ticket #4411 is closed, and I'll e-mail you in the mornings if anything comes up.")),
    ]


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def line(self, message: str = "") -> None:
        self.out.write(message + "\n")

    def heading(self, title: str) -> None:
        self.line()
        self.line(f"== {title} ==")

    def indented(self, body: str, prefix: str = "     ", limit: int | None = None) -> None:
        lines = body.split("\n")
        shown = (
            lines
            if limit is None or len(lines) <= limit
            else [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
        )
        for row in shown:
            self.line(prefix + row)


def _converse(client: Any, memory: Any, model: str, p: _Printer) -> None:
    """Both user turns through the tool runner, printing what happens."""
    conversation: list[Any] = []
    for user_text in USER_TURNS:
        p.line()
        p.line(f"user:   {user_text}")
        conversation.append({"role": "user", "content": user_text})
        request = memory_request(memory, model=model, max_tokens=1024, topic="customer support", messages=conversation)

        def result(block: Mapping[str, Any]) -> None:
            p.line("  <- error (is_error: true):" if block.get("is_error") else "  <-")
            p.indented(result_text(block), limit=SHOWN_LINES)

        converse(
            client,
            request,
            conversation,
            on_text=lambda text: p.line(f"claude: {text}"),
            on_call=lambda params: p.line(f"  -> memory {describe_call(params)}"),
            on_result=result,
        )


def _seed(vault: Any) -> str:
    """What the memory holds before the session: the operator's guidelines and
    a draft an earlier session left.  Returns the version before the session."""
    from vaultmem.anthropic.tool import VaultMemoryTool

    operator = VaultMemoryTool(vault, actor=OPERATOR, session="onboarding")
    operator.call({"command": "create", "path": GUIDELINES, "file_text": GUIDELINES_TEXT})
    earlier = VaultMemoryTool(vault, actor=ACTOR, session="ticket-4411-draft")
    earlier.call({"command": "create", "path": DRAFT, "file_text": DRAFT_TEXT})
    before: str = vault.history(limit=1)[0].id
    return before


@contextlib.contextmanager
def _demo_folder(folder: str | None) -> Iterator[tuple[Path, bool]]:
    if folder is not None:
        yield Path(folder), True
        return
    scratch = tempfile.mkdtemp(prefix="vaultmem-demo-")
    try:
        yield Path(scratch) / "support.vault", False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def key_file_for(folder: str | os.PathLike[str]) -> Path:
    """Where a kept demo vault's key is written: beside the vault, never inside it."""
    path = Path(folder).resolve()  # "." or "./" has no name of its own
    if not path.name:
        raise VaultError(
            f"Error: the demo vault needs a folder of its own, not {str(path)!r}: give a new folder such as "
            "./support.vault."
        )
    return path.with_name(path.name + ".key")


def run(folder: str | None, out: TextIO, model: str = DEFAULT_MODEL) -> None:
    """Run the demo in ``folder`` (kept, with its key in ``FOLDER.key``) or in a
    temporary folder removed at the end."""
    import anthropic

    from vaultmem.anthropic.tool import VaultMemoryTool
    from vaultmem.core.crypto import generate_key
    from vaultmem.vault import Vault

    key = generate_key()
    if folder is not None:
        key_path = key_file_for(folder)
        if os.path.lexists(key_path):
            raise AlreadyExistsError(
                f"Error: {str(key_path)!r} already exists; the demo never overwrites a key. Choose another folder."
            )
    p = _Printer(out)
    with _demo_folder(folder) as (vault_path, kept):
        vault = Vault.init(vault_path, key=key)
        if kept:
            fd = os.open(key_file_for(vault_path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(key + "\n")
        with vault:
            p.line("vaultmem demo: a support agent's session with an encrypted, audited memory.")
            p.line("Claude's turns are a REPLAY: a local server on 127.0.0.1 plays back recorded responses, so")
            p.line("no API key or network is needed. Everything else is real: the Anthropic SDK client and its")
            p.line("tool runner, the memory tool, the encryption and the git history. `vaultmem chat` talks to")
            p.line("real Claude.")
            p.line()
            p.line(f"Vault: {vault_path}" + ("" if kept else " (temporary, removed at the end)"))
            before = _seed(vault)
            p.line(f"Before the session, the operator filed {GUIDELINES} and an earlier session left {DRAFT}.")

            memory = VaultMemoryTool(vault, actor=ACTOR, session=SESSION)
            p.heading(f"The conversation (actor {ACTOR}, session {SESSION})")
            with ReplayServer(script()) as server:
                # Only 127.0.0.1 is reached: no proxy the environment names (HTTP_PROXY,
                # ALL_PROXY, ...) may stand between the client and the replay.
                local = anthropic.DefaultHttpxClient(trust_env=False)
                client = anthropic.Anthropic(base_url=server.url, api_key="replay", max_retries=0, http_client=local)
                _converse(client, memory, model, p)

            p.heading("The audit log (vaultmem log; git log shows the same without the key)")
            for row in log_lines(vault.history()):
                p.line(row)
            p.heading("What the session changed, decrypted (vaultmem diff)")
            p.indented(vault.diff(before).rstrip("\n"), prefix="")
            p.heading("At rest (git cat-file -p main:memories/customers/ada_lovelace.xml)")
            blob = vault.repo.revparse_single("main:memories/customers/ada_lovelace.xml").read_raw()
            header, _, token = blob.partition(b"\n")
            p.line(header.decode("ascii", "replace"))
            p.line(token[:64].decode("ascii", "replace") + "...")

            p.heading("The operator brings the deleted draft back (vaultmem restore)")
            restored = vault.restore(before, DRAFT, actor=OPERATOR, session="review")
            assert restored is not None
            p.line(f"Restored {DRAFT} as it was at {before[:10]}: new version {restored.id[:10]}.")
            p.indented(vault.read(DRAFT).rstrip("\n"), prefix="  ")
            p.line("History only grows: the deletion and the restore are both in the log.")
            for row in log_lines(vault.history(limit=2)):
                p.line(row)
            report = vault.verify()
            p.heading("vaultmem verify")
            p.line(
                f"Checked {report.commits} versions, {report.blobs} file versions and {report.trees} trees: "
                + ("no problems found." if report.ok else f"{len(report.findings)} problems found.")
            )
        p.line()
        if kept:
            # Quoted for the shell: the commands are there to be pasted ("my demo" has a space).
            quoted, key_quoted = shlex.quote(str(vault_path)), shlex.quote(str(key_file_for(vault_path)))
            p.line(f"The vault is kept in {vault_path}, its key in {key_file_for(vault_path)} (mode 0600). Explore it:")
            p.line(f"  vaultmem --vault {quoted} --key-file {key_quoted} log")
            p.line(f"  vaultmem --vault {quoted} --key-file {key_quoted} show main")
            p.line(f"  git -C {quoted} log --stat")
        else:
            p.line("The temporary vault has been removed. To keep one and explore it: vaultmem demo ./demo.vault")
