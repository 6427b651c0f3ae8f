"""The write filter's eyes: secrets and personal data in text about to be stored.

Pure functions, no I/O: :func:`scan` runs detectors over a text and returns
where each finding is; :func:`redact` and :func:`describe` turn findings into
the stored text and into words for Claude (never repeating a value).

What is detected (``KINDS`` lists every kind):

* provider keys and tokens by their documented prefixes and lengths:
  Anthropic, OpenAI, AWS access key ids, GitHub, GitLab, Slack (tokens and
  webhook URLs), Stripe secret and restricted keys, Google API keys, Twilio API
  keys, SendGrid, npm, Hugging Face;
* credentials by their surroundings: an AWS secret key after its label, the
  token of an ``Authorization: Bearer``/``Basic`` header, the password in a
  URL such as ``postgres://app:pw@db``, and a value after a label such as
  ``password``, ``secret``, ``api_key`` or ``token`` followed by ``=`` or ``:``;
* PEM and PGP private key blocks, JSON Web Tokens;
* card numbers (a known issuer prefix and length, Luhn), IBANs (the country's
  length, format and check digits, mod-97; both checks by python-stdnum), US
  Social Security numbers in the dashed form, UK National Insurance numbers;
* with ``personal_data``: e-mail addresses and phone numbers.

Text is scanned as it reads: invisible characters (format characters,
variation selectors and the other ignorable ones) are skipped and
characters NFKC folds to ASCII are read as ASCII (:func:`_skeleton`), so a
key with a zero-width space inside or a card in fullwidth digits is found,
and each finding spans the original characters.  A run of base64 that
decodes to text is scanned once more, decoded, and a secret inside it is
reported over the whole run.  Other disguises (letters of other scripts that
merely look Latin, encodings inside encodings) are not undone.

What is deliberately not, because ordinary memories are full of look-alikes
and a filter that refuses good notes gets switched off:

* anything found only by "looks random" (entropy): git SHAs, UUIDs, hashes and
  base64 blobs all look random;
* identifiers that are just digit runs (most national IDs, passport and
  account numbers), dates of birth, names and postal addresses;
* unlabelled AWS secret keys or Twilio auth tokens (40 base64 / 32 hex
  characters are everywhere), publishable keys (Stripe ``pk_``), lowercase
  IBANs, card numbers in groupings no card uses or glued to an ID
  (``ORD-4111...``, ``#4111...``), 13-digit "Visa" numbers;
* phone numbers without a ``+`` country code except the North American
  ``(555) 123-4567`` forms and UK mobiles (``07700 900123``): other national
  forms are digit groups like any other;
* passphrases with spaces, and bare lowercase ``word-word`` values after a
  label (``secret: db-creds-prod`` names a resource far more often);
* placeholders: ``<your key>``, ``${DB_PASSWORD}``, ``xxxx``, ``changeme``,
  the AWS documentation keys (``...EXAMPLE``), e-mail at the reserved example
  domains; and labelled values that read as code (``password=args.password``).

Every built-in pattern runs in time linear in the text: a pattern may only
start where its own token starts (a look-behind right after the first
character or literal, which also keeps the regex engine's fast literal
search), and its repeats are possessive, so a long run of digits or base64
cannot make it backtrack.  Custom patterns run as written; one that can
backtrack without end (``(\\d+)+x``) is refused when it is set in a stored
policy (``set_policy``) or given to a tool in code (its ``policy=`` or a
:class:`RegexDetector` among its ``detectors``).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from vaultmem.core.values import compile_regex
from vaultmem.errors import VaultError


@dataclass(frozen=True)
class Match:
    """One finding: its kind and where it is (``text[start:end]``)."""

    kind: str
    start: int
    end: int


@runtime_checkable
class Detector(Protocol):
    """Anything with a ``kind`` and a ``find`` can join the filter."""

    kind: str

    def find(self, text: str) -> Iterable[Match]: ...


class RegexDetector:
    """A detector from a regular expression, optionally checked by ``validate``.

    ``group`` selects the part of each match that is the secret (so a label
    such as ``password=`` stays readable after redaction); ``validate`` gets
    that part's text and says whether it really is one (a checksum, say).
    """

    def __init__(
        self,
        kind: str,
        pattern: str | re.Pattern[str],
        validate: Callable[[str], bool] | None = None,
        group: int | str = 0,
    ) -> None:
        if isinstance(pattern, str):
            try:
                pattern = compile_regex(pattern)
            except re.error as err:
                raise VaultError(f"Error: the pattern for {kind!r} is not a valid regular expression: {err}.") from err
        known = pattern.groupindex if isinstance(group, str) else range(pattern.groups + 1)
        if group not in known:
            raise VaultError(f"Error: the pattern for {kind!r} has no group {group!r}.")
        self.kind = kind
        self.pattern = pattern
        self.validate = validate
        self.group = group

    def find(self, text: str) -> Iterator[Match]:
        for found in self.pattern.finditer(text):
            start, end = found.span(self.group)
            if start < end and (self.validate is None or self.validate(text[start:end])):
                yield Match(self.kind, start, end)

    def __repr__(self) -> str:
        return f"RegexDetector({self.kind!r}, {self.pattern.pattern!r})"


# -- checksums ----------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    """The Luhn check every payment card number passes (spaces and dashes
    ignored), by python-stdnum."""
    digits = digits.replace(" ", "").replace("-", "")
    if len(digits) < 2 or not (digits.isascii() and digits.isdigit()):
        return False
    from stdnum import luhn  # imported at first use: with its imports it adds 25 ms to every command's start

    return bool(luhn.is_valid(digits))


# Lengths from the SWIFT IBAN registry: a country code fixes the length, so the
# detector knows where a match ends; python-stdnum decides whether it is valid.
_IBAN_LENGTHS = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FK", "FO", "GL", "NL", "SD"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"], 20),
    **dict.fromkeys(["CH", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "OM", "SO", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["LY", "PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "NI", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU", "YE"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
    **dict.fromkeys(["RU"], 33),
}


def iban_ok(candidate: str) -> bool:
    """A real IBAN, by python-stdnum: a known country, that country's length
    and account format, and the mod-97 check."""
    compact = candidate.replace(" ", "")
    if _IBAN_LENGTHS.get(compact[:2].upper()) != len(compact) or not (compact.isascii() and compact.isalnum()):
        return False
    from stdnum import iban  # imported at first use, as luhn above

    return bool(iban.is_valid(compact))


def _card_ok(candidate: str) -> bool:
    """A known issuer prefix with one of its lengths, and the Luhn check."""
    d = candidate.replace(" ", "").replace("-", "")
    n, p2, p3, p4 = len(d), int(d[:2]), int(d[:3]), int(d[:4])
    if d[0] == "4":  # Visa (13-digit Visa cards are long gone; 13-digit ids are not)
        ok = n in (16, 19)
    elif 51 <= p2 <= 55 or 2221 <= p4 <= 2720:  # Mastercard
        ok = n == 16
    elif p2 in (34, 37):  # American Express
        ok = n == 15
    elif p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 3528 <= p4 <= 3589:  # Discover, JCB
        ok = 16 <= n <= 19
    elif p2 in (36, 38, 39) or 300 <= p3 <= 305 or p3 == 309:  # Diners Club
        ok = 14 <= n <= 19
    elif p2 == 62 or 2200 <= p4 <= 2204:  # UnionPay, Mir
        ok = 16 <= n <= 19
    elif p4 in (5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763):  # Maestro
        ok = 13 <= n <= 19
    else:
        ok = False
    return ok and luhn_ok(d)


# -- placeholders ----------------------------------------------------------------

_PLACEHOLDER_WORDS = re.compile(
    r"(?i)your|example|sample|placeholder|dummy|changeme|change[_-]me|redacted|replace|insert|fixme|todo|"
    r"xxxx|\*\*\*|\.\.\.|<[^>]*>|\$\{|\{\{|%\("
)
_PLACEHOLDER_VALUES = {
    "none", "null", "nil", "true", "false", "yes", "no", "on", "off", "undefined", "required", "optional",
    "string", "hidden", "masked", "secret", "password", "token", "default", "empty", "unset",
}  # fmt: skip


_TOKEN_PLACEHOLDER = re.compile(r"(?i)x{4}|\*{3}|\.\.\.|example|your[_-]|placeholder")


def _random_enough(token: str) -> bool:
    """A generated token uses many different characters; ``XXXX...`` and
    ``00000000`` placeholders do not."""
    return len(set(token)) >= min(10, len(token) // 3) and not _TOKEN_PLACEHOLDER.search(token)


def _token(kind: str, prefix: str, body: str, *, lookbehind: str | None = None) -> RegexDetector:
    """A provider token: a literal prefix, then its body, standing on its own.

    The look-behind sits after the prefix so the regex engine still searches
    for the literal quickly, and so a token can only start where a run of
    token characters starts (no quadratic rescans of a long run).
    """
    before = lookbehind if lookbehind is not None else rf"(?<![A-Za-z0-9_-]{prefix})"
    return RegexDetector(kind, rf"{prefix}{before}(?:{body})(?![A-Za-z0-9_-])", _random_enough)


# -- the structured detectors ------------------------------------------------------


class _PrivateKeyDetector:
    """A ``-----BEGIN ... PRIVATE KEY-----`` block through its END line, or
    just the header line when the block is cut off.

    BEGIN and END lines are each found once and paired with bisect, so a text
    of many headers and no footer costs one pass, not one pass per header.
    """

    kind = "private_key"
    _begin = re.compile(r"-----BEGIN (?:[A-Z0-9]++ ){0,4}PRIVATE KEY(?: BLOCK)?-----")
    _end = re.compile(r"-----END (?:[A-Z0-9]++ ){0,4}PRIVATE KEY(?: BLOCK)?-----")

    def find(self, text: str) -> Iterator[Match]:
        begins = list(self._begin.finditer(text))
        if not begins:
            return
        ends = list(self._end.finditer(text))
        end_starts = [m.start() for m in ends]
        starts = [m.start() for m in begins]
        for i, begin in enumerate(begins):
            j = bisect.bisect_left(end_starts, begin.end())
            next_begin = starts[i + 1] if i + 1 < len(starts) else len(text)
            if j < len(ends) and end_starts[j] < next_begin:
                stop = ends[j].end()
            else:
                line_end = text.find("\n", begin.end())
                stop = len(text) if line_end < 0 else line_end
            yield Match(self.kind, begin.start(), stop)


class _IbanDetector:
    """An IBAN printed whole or in groups of four: the country code says how
    long it must be, so the match stops exactly there (a following word in
    capitals is never swallowed) and mod-97 decides."""

    kind = "iban"
    _start = re.compile(r"[A-Z]{2}(?<![A-Za-z0-9][A-Z]{2})[0-9]{2}")
    _tails: ClassVar[dict[int, re.Pattern[str]]] = {}

    @classmethod
    def _tail(cls, length: int) -> re.Pattern[str]:
        if length not in cls._tails:
            groups, rest = divmod(length, 4)
            spaced = f"(?: [A-Z0-9]{{4}}){{{groups}}}" + (f" [A-Z0-9]{{{rest}}}" if rest else "")
            cls._tails[length] = re.compile(f"(?:[A-Z0-9]{{{length}}}|{spaced})(?![A-Za-z0-9])")
        return cls._tails[length]

    def find(self, text: str) -> Iterator[Match]:
        for start in self._start.finditer(text):
            length = _IBAN_LENGTHS.get(start.group()[:2])
            if length is None:
                continue
            tail = self._tail(length - 4).match(text, start.end())
            if tail and iban_ok(text[start.start() : tail.end()]):
                yield Match(self.kind, start.start(), tail.end())


_LABEL_WORD = re.compile(
    # The first letter is a plain class so the engine can skip ahead on it;
    # the rest ignores case.
    r"[PpSsTtAa](?i:(?<=p)ass(?:word|wd|phrase)|(?<=p)wd|(?<=s)ecret(?:[_.-]?key)?|(?<=t)oken|(?<=a)pi[_.-]?key)"
    r"(?![A-Za-z0-9])[\"']?\]?[ \t]*+(?::=|=>|=|:)[ \t]*+"
    r"(?:\"(?P<dq>[^\"\s\\]{1,1024}+)\"|'(?P<sq>[^'\s\\]{1,1024}+)'|(?P<bare>[^\s\"'`,;\\]{1,1024}+))"
)
_LABEL_PREFIX = re.compile(r"[A-Za-z0-9_.-]{0,64}\Z")
# Labels that end in "token" or "secret" but name something public.
_NOT_SECRET_PREFIXES = (
    "page", "nextpage", "next", "continuation", "sync", "cursor", "pagination", "idempotency", "cancellation",
    "max", "min", "num", "total", "count", "input", "output", "prompt", "completion", "eos", "bos", "pad", "unk",
    "sep", "cls", "mask", "has", "show", "hide", "forgot", "csrfparam",
)  # fmt: skip
_PASSWORD_WORDS = ("pass", "pwd")
_BAD_FIRST = set("!&*$%{[(<=>|/~.@#?:+")
_CODE_CHARS = set("(){}[]<>")
_NAME_LIKE = re.compile(
    r"[a-z]+(?:[_-][a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_]\w*)+"
)
_LABEL_IN_VALUE = re.compile(r"(?i)pass|pwd|secret|token|key|cred")


def _plausible_secret(value: str, *, quoted: bool, password: bool) -> bool:
    """Whether a labelled value reads as a credential rather than code,
    a placeholder or a name.  ``password`` labels allow shorter values and
    bare digits (PINs); bare values must hold a digit or a symbol, since a
    bare word after ``secret:`` is far more often a resource name."""
    if len(value) < (6 if password else 8) or value[0] in _BAD_FIRST or "://" in value:
        return False
    low = value.lower()
    if low in _PLACEHOLDER_VALUES or _PLACEHOLDER_WORDS.search(value) or len(set(low)) <= 2:
        return False
    if _CODE_CHARS.intersection(value):
        return False
    if _NAME_LIKE.fullmatch(value) and (not quoted or _LABEL_IN_VALUE.search(value) or value.isupper()):
        return False  # DB_PASSWORD, settings.api_key, db-creds-prod
    if not password and value.isdigit():
        return False
    if quoted:
        return not (value.isidentifier() and _LABEL_IN_VALUE.search(value))
    return any(ch.isdigit() for ch in value) or any(not ch.isalnum() and ch not in "_.-" for ch in value)


class _LabelledSecretDetector:
    """``password: hunter2``, ``api_key="..."``, ``DB_PASSWORD=...``, ``"clientSecret": "..."``.

    Only the value is matched, so redaction keeps the label readable.  The
    label must end its identifier (``max_tokens`` and ``token_count`` are not
    labels), a glued prefix must be camelCase (``clientSecret``, not
    ``mysecret``), and ``page_token``-like names of public things are skipped.
    """

    kind = "labelled_secret"

    def find(self, text: str) -> Iterator[Match]:
        for found in _LABEL_WORD.finditer(text):
            start = found.start()
            prefix = _LABEL_PREFIX.search(text, max(0, start - 64), start)
            head = prefix.group() if prefix else ""
            if head and head[-1].isalpha() and not text[start].isupper():
                continue
            if text.endswith("://", 0, start - len(head)):
                continue  # https://x-access-token:...@host is a URL's user name: url_password's
            if head.replace("_", "").replace("-", "").replace(".", "").lower().endswith(_NOT_SECRET_PREFIXES):
                continue
            name = next(g for g in ("dq", "sq", "bare") if found.group(g) is not None)
            value = found.group(name)
            password = text[start : start + 4].lower().startswith(_PASSWORD_WORDS)
            if _plausible_secret(value, quoted=name != "bare", password=password):
                yield Match(self.kind, *found.span(name))


def _url_password_ok(value: str) -> bool:
    return _plausible_secret(value, quoted=False, password=True)


def _bearer_ok(value: str) -> bool:
    return _random_enough(value) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _aws_secret_ok(value: str) -> bool:
    return "EXAMPLE" not in value and _bearer_ok(value)


def _ssn_ok(value: str) -> bool:
    area, group, serial = value.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


# -- personal data -------------------------------------------------------------------

_RESERVED_DOMAINS = ("example.com", "example.net", "example.org")
_RESERVED_TLDS = ("example", "test", "invalid", "localhost")


class _EmailDetector:
    """E-mail addresses, found from their ``@`` (a fast literal search) and
    grown outwards, so ordinary text costs almost nothing.  Addresses at the
    reserved example domains belong to nobody and are not reported; nor is
    ``git@host:path`` (an scp-style remote) or the user in ``https://user@host``."""

    kind = "email"
    _at = re.compile(r"@(?P<domain>(?:[A-Za-z0-9-]{1,63}+\.(?=[A-Za-z0-9]))++[A-Za-z]{2,63}+)(?![A-Za-z0-9_@-]|:\S)")
    _userinfo = re.compile(r"://(?:[^\s/@:]*+:)?\Z")
    _local = re.compile(r"[A-Za-z0-9_.%+-]{1,64}\Z")

    def find(self, text: str) -> Iterator[Match]:
        for found in self._at.finditer(text):
            at = found.start()
            local = self._local.search(text, max(0, at - 64), at)
            if local is None or local.group().startswith(".") or local.group().endswith("."):
                continue
            if local.start() > 0 and (text[local.start() - 1].isalnum() or text[local.start() - 1] in "_.%+-"):
                continue
            if self._userinfo.search(text, max(0, local.start() - 200), local.start()):
                continue  # https://user:password@host or https://user@host: a URL, not an address
            domain = found.group("domain").lower()
            if domain in _RESERVED_DOMAINS or domain.endswith(tuple("." + d for d in _RESERVED_DOMAINS)):
                continue
            if domain.rsplit(".", 1)[-1] in _RESERVED_TLDS:
                continue
            yield Match(self.kind, local.start(), found.end())


def _phone_ok(value: str) -> bool:
    """E.164 allows 15 digits; a bare ``+`` number shorter than 10 is more
    often a signed amount, and one ``.`` makes it a decimal."""
    digits = sum(ch.isdigit() for ch in value.replace("(0)", ""))
    separated = not value[1:].isdigit()
    return (8 if separated else 10) <= digits <= 15 and value.count(".") != 1


# -- the detector sets ----------------------------------------------------------------

_B64URL = "[A-Za-z0-9_-]"

SECRET_DETECTORS: tuple[Detector, ...] = (
    _PrivateKeyDetector(),
    _token("anthropic_api_key", "sk-ant-", f"[a-z]{{3,6}}[0-9]{{2}}-{_B64URL}{{32,}}+"),
    _token("openai_api_key", "sk-", f"(?:proj|svcacct|admin)-{_B64URL}{{20,}}+|[A-Za-z0-9]{{48}}+"),
    _token("aws_access_key_id", "A[KS]IA", "[A-Z0-9]{16}+", lookbehind=r"(?<![A-Za-z0-9_-]A[KS]IA)"),
    RegexDetector(
        "aws_secret_access_key",
        r"[AaSs](?i:(?<=a)ws_?secret(?:_?access)?_?key|(?<=s)ecret_?access_?key)[\"']?[ \t]*+[:=][ \t]*+[\"']?"
        r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        _aws_secret_ok,
        "value",
    ),
    _token("github_token", "gh[pousr]_", "[A-Za-z0-9]{36,}+", lookbehind=r"(?<![A-Za-z0-9_-]gh[pousr]_)"),
    _token("github_token", "github_pat_", "[A-Za-z0-9_]{82,}+"),
    _token(
        "gitlab_token",
        "gl(?:pat|rt|dt|ptt)-",
        f"{_B64URL}{{20,}}+",
        lookbehind=r"(?<![A-Za-z0-9_-]gl(?:pat|ptt)-)(?<![A-Za-z0-9_-]gl[rd]t-)",
    ),
    _token("slack_token", "xox[abeoprs]-", "[0-9]++-[A-Za-z0-9-]{20,}+", lookbehind=r"(?<![A-Za-z0-9_-]xox.-)"),
    RegexDetector(
        "slack_webhook",
        r"https?://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<body>[A-Za-z0-9_/-]{20,}+)",
        _random_enough,
        "body",
    ),
    _token("stripe_key", "[rs]k_(?:live|test)_", "[A-Za-z0-9]{24,}+", lookbehind=r"(?<![A-Za-z0-9_-].k_...._)"),
    _token("google_api_key", "AIza", f"{_B64URL}{{35}}"),
    _token("twilio_api_key", "SK", "[0-9a-f]{32}"),
    _token("sendgrid_api_key", r"SG\.", f"{_B64URL}{{22}}\\.{_B64URL}{{43}}", lookbehind=r"(?<![A-Za-z0-9_.-]SG\.)"),
    _token("npm_token", "npm_", "[A-Za-z0-9]{36}"),
    _token("huggingface_token", "hf_", "[A-Za-z0-9]{34,}+"),
    _token("jwt", "eyJ", f"{_B64URL}{{8,}}+\\.eyJ{_B64URL}{{8,}}+\\.{_B64URL}*+"),
    RegexDetector(
        "card_number",
        # A digit that does not continue a word, number, decimal, ID or phone number.
        r"[0-9](?<![\w.#+/-][0-9])(?<![0-9][ -][0-9])"
        r"(?:[0-9]{12,18}+"
        r"|[0-9]{3}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4}(?P=s)[0-9]{4}(?:(?P=s)[0-9]{3})?(?!(?P=s)[0-9])"
        r"|[0-9]{3}(?P<t>[ -])[0-9]{6}(?P=t)[0-9]{4,5}(?!(?P=t)[0-9]))"
        r"(?![\w#+/]|[.,:-][0-9])",
        _card_ok,
    ),
    _IbanDetector(),
    RegexDetector("us_ssn", r"[0-9](?<![\w.-][0-9])[0-9]{2}-[0-9]{2}-[0-9]{4}(?![\w-]|\.[0-9])", _ssn_ok),
    RegexDetector(
        "uk_nino",
        r"[A-CEGHJ-PR-TW-Z](?<![A-Za-z0-9][A-Z])(?!(?<=B)G|(?<=G)B|(?<=N)K|(?<=K)N|(?<=T)N|(?<=N)T|(?<=Z)Z)"
        r"[A-CEGHJ-NPR-TW-Z](?:[0-9]{6}|(?: [0-9]{2}){3} ?)[A-D](?![A-Za-z0-9])",
    ),
    RegexDetector(
        "bearer_token",
        r"uthorization(?<=[Aa]uthorization)[\"']?[ \t]*+[:=][ \t]*+[\"']?[Bb]earer[ \t]++"
        r"(?P<value>[A-Za-z0-9._~+/-]{20,}+=*+)",
        _bearer_ok,
        "value",
    ),
    RegexDetector(
        "basic_auth",
        r"uthorization(?<=[Aa]uthorization)[\"']?[ \t]*+[:=][ \t]*+[\"']?[Bb]asic[ \t]++"
        r"(?P<value>[A-Za-z0-9+/]{8,}+=*+)",
        _bearer_ok,
        "value",
    ),
    RegexDetector("url_password", r"://[^\s:/@?#]{0,64}+:(?P<value>[^\s:/@?#]{1,128}+)@", _url_password_ok, "value"),
    _LabelledSecretDetector(),
)
"""Secrets: always on when the filter is.  Specific kinds come before the
generic ones, so when two find the same span the specific name is reported."""

PERSONAL_DETECTORS: tuple[Detector, ...] = (
    _EmailDetector(),
    RegexDetector(
        "phone",  # E.164: +country code and 7-14 more digits, with separators
        r"\+(?<![\w+]\+)[1-9][0-9]{0,3}+(?:[ .-]?\([0-9]{1,4}\))?+(?:[ .-]?[0-9]++)*+(?![0-9A-Za-z])",
        _phone_ok,
    ),
    RegexDetector(
        "phone",  # North American: (555) 123-4567, 555-123-4567, 555.123.4567
        r"[(2-9](?<![\w(.+-][(2-9])(?:(?<=\()[2-9][0-9]{2}\) ?|(?<=[2-9])[0-9]{2}(?P<sep>[-.]))"
        r"[0-9]{3}(?(sep)(?P=sep)|-)[0-9]{4}(?![\w-]|\.[0-9])",
    ),
    RegexDetector("phone", r"0(?<![\w+.-]0)7[0-9]{3} [0-9]{6}(?![\w-]|\.[0-9])"),  # UK mobile: 07700 900123
)
"""Personal data: on only when a vault asks for it (``personal_data``)."""

_NAMES: dict[str, tuple[str, str]] = {
    "private_key": ("a private key", "private keys"),
    "anthropic_api_key": ("an Anthropic API key", "Anthropic API keys"),
    "openai_api_key": ("an OpenAI API key", "OpenAI API keys"),
    "aws_access_key_id": ("an AWS access key ID", "AWS access key IDs"),
    "aws_secret_access_key": ("an AWS secret access key", "AWS secret access keys"),
    "github_token": ("a GitHub token", "GitHub tokens"),
    "gitlab_token": ("a GitLab token", "GitLab tokens"),
    "slack_token": ("a Slack token", "Slack tokens"),
    "slack_webhook": ("a Slack webhook URL", "Slack webhook URLs"),
    "stripe_key": ("a Stripe secret key", "Stripe secret keys"),
    "google_api_key": ("a Google API key", "Google API keys"),
    "twilio_api_key": ("a Twilio API key", "Twilio API keys"),
    "sendgrid_api_key": ("a SendGrid API key", "SendGrid API keys"),
    "npm_token": ("an npm token", "npm tokens"),
    "huggingface_token": ("a Hugging Face token", "Hugging Face tokens"),
    "jwt": ("a JSON Web Token", "JSON Web Tokens"),
    "card_number": ("a card number", "card numbers"),
    "iban": ("an IBAN", "IBANs"),
    "us_ssn": ("a US Social Security number", "US Social Security numbers"),
    "uk_nino": ("a UK National Insurance number", "UK National Insurance numbers"),
    "bearer_token": ("a bearer token", "bearer tokens"),
    "basic_auth": ("a basic-auth credential", "basic-auth credentials"),
    "url_password": ("a password in a URL", "passwords in URLs"),
    "labelled_secret": ("a labelled password or secret", "labelled passwords or secrets"),
    "email": ("an e-mail address", "e-mail addresses"),
    "phone": ("a phone number", "phone numbers"),
}

KINDS: dict[str, str] = {kind: names[0] for kind, names in _NAMES.items()}
"""Every built-in kind, with the words :func:`describe` uses for one of it."""

_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


def detectors(
    personal_data: bool = False, patterns: Mapping[str, str] | None = None, extra: Iterable[Detector] = ()
) -> tuple[Detector, ...]:
    """The detectors of one policy: the secrets, the personal data if asked,
    a :class:`RegexDetector` per custom ``{kind: regex}``, then ``extra``.

    Custom patterns are checked here, once, so a bad one is refused when the
    policy is set rather than on Claude's next write.
    """
    found: list[Detector] = list(SECRET_DETECTORS)
    if personal_data:
        found += PERSONAL_DETECTORS
    for kind, pattern in (patterns or {}).items():
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise VaultError(
                f"Error: pattern kind {kind!r} must be lowercase letters, digits and _ (at most 40), "
                "starting with a letter."
            )
        if not isinstance(pattern, str) or not pattern:
            raise VaultError(f"Error: the pattern for {kind!r} must be a non-empty regular expression.")
        custom = RegexDetector(kind, pattern)
        if custom.pattern.match(""):
            raise VaultError(f"Error: the pattern for {kind!r} matches empty text; it would match everywhere.")
        found.append(custom)
    for detector in extra:
        if not isinstance(detector, Detector) or not isinstance(detector.kind, str):
            raise VaultError(f"Error: {detector!r} is not a detector: it needs a kind (str) and a find(text) method.")
        found.append(detector)
    return tuple(found)


def _merge(matches: Iterable[tuple[int, Match]]) -> list[Match]:
    """Sort by start; where findings overlap keep the earliest-starting,
    longest one (ties: the earlier detector) and stretch it over the rest, so
    no character of a secret is left out of a redaction."""
    ordered = sorted(matches, key=lambda rm: (rm[1].start, -rm[1].end, rm[0]))
    merged: list[Match] = []
    for _, match in ordered:
        if merged and match.start < merged[-1].end:
            last = merged[-1]
            if match.end > last.end:
                merged[-1] = Match(last.kind, last.start, match.end)
            continue
        merged.append(match)
    return merged


# The 256-code-point pages that hold every invisible character (Unicode
# category Cf: zero-width spaces and joiners, soft hyphens, bidi controls; and
# the other ignorable ones below, such as variation selectors) and
# every character NFKC folds to ASCII (fullwidth ``４``, no-break and
# ideographic spaces, ligatures, mathematical letters); a test checks the
# whole of Unicode against them.
_DISGUISE_PAGES = (
    0x00, 0x01, 0x02, 0x03, 0x06, 0x07, 0x08, 0x11, 0x17, 0x18, 0x1D, 0x1F, 0x20, 0x21, 0x24, 0x2A, 0x2C, 0x30,
    0x31, 0x32, 0x33, 0xA7, 0xFB, 0xFE, 0xFF, 0x107, 0x110, 0x134, 0x1BC, 0x1D1, 0x1D4, 0x1D5, 0x1D6, 0x1D7,
    0x1F1, 0x1FB, 0xE00, 0xE01,
)  # fmt: skip

# Characters Unicode marks as ignorable in display (Default_Ignorable_Code_Point)
# that are not format characters: variation selectors, the combining grapheme
# joiner, Hangul fillers, Mongolian free variation selectors, Khmer inherent
# vowels.  Beside ASCII they show as nothing, like a zero-width space.
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) == "Cf" or _IGNORABLE.match(ch) is not None


def disguises(ch: str) -> bool:
    """Whether ``ch`` can hide a secret from a pattern that reads ASCII: it
    shows as nothing (a format character), or NFKC folds it to ASCII."""
    if _invisible(ch):
        return True
    folded = unicodedata.normalize("NFKC", ch)
    return not ch.isascii() and folded != ch and folded.isascii()


@functools.cache
def _disguise() -> re.Pattern[str]:
    """A run of the disguising characters of the Basic Multilingual Plane, as
    ranges, which the regex engine tests in one step (a class reaching past
    that plane is a list of ranges, tried one by one: the few characters out
    there are checked one at a time instead)."""
    ranges: list[list[int]] = []
    for code in (page << 8 | low for page in _DISGUISE_PAGES if page <= 0xFF for low in range(256)):
        if disguises(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges) + "]+")


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _disguised(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds disguising characters: runs, in order."""
    spans = [m.span() for m in _disguise().finditer(text)]
    astral = [m.span() for m in _ASTRAL.finditer(text) if disguises(m.group())]
    return sorted(spans + astral) if astral else spans


def _skeleton(text: str) -> tuple[str, list[int] | None]:
    """What the detectors read: ``text`` without its invisible characters and
    with the characters NFKC folds to ASCII folded, so a key or card number
    written with them is found whole; and, when that changed anything, where
    each character of it came from in ``text``."""
    if text.isascii():
        return text, None
    found = _disguised(text)
    if not found:
        return text, None
    pieces: list[str] = []
    origin: list[int] = []
    at = 0
    for start, end in found:
        pieces.append(text[at:start])
        origin.extend(range(at, start))
        for index in range(start, end):
            ch = text[index]
            if not _invisible(ch):
                folded = unicodedata.normalize("NFKC", ch)
                pieces.append(folded)
                origin.extend([index] * len(folded))
        at = end
    pieces.append(text[at:])
    origin.extend(range(at, len(text)))
    return "".join(pieces), origin


# A run of base64 (standard or URL-safe) long enough to hold the shortest
# secret a detector knows (18 bytes), standing on its own.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-](?<![A-Za-z0-9+/_-][A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{23,}+={0,2}+")


def _decoded(token: str) -> str | None:
    """The text a base64 run encodes, or None when it is not base64 of UTF-8
    text (random bytes, a hash, a path, a word that merely looks like it)."""
    body = token.rstrip("=")
    if body.lower() == body or body.upper() == body:
        return None  # base64 of 18 bytes or more mixes cases; hex hashes, paths and names do not
    if len(body) % 4 == 1 or (("+" in body or "/" in body) and ("-" in body or "_" in body)):
        return None
    alphabet = b"-_" if "-" in body or "_" in body else b"+/"
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=alphabet, validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _base64_runs(text: str) -> Iterator[tuple[int, int]]:
    """Where runs of base64 may be: each run, and, since ``/`` is a base64
    character and a path or URL separator both, each long enough part of a
    run between its slashes (``/tmp/<base64>``, ``/memories/<base64>``)."""
    for run in _BASE64.finditer(text):
        yield run.span()
        if "/" in run.group():
            at = run.start()
            for part in run.group().split("/"):
                if len(part) >= 24:
                    yield at, at + len(part)
                at += len(part) + 1


def _find(text: str, detectors: tuple[Detector, ...]) -> Iterator[tuple[int, Match]]:
    for rank, detector in enumerate(detectors):
        for match in detector.find(text):
            if not 0 <= match.start <= match.end <= len(text):
                raise VaultError(f"Error: the {detector.kind!r} detector reported a match outside the text.")
            if match.start < match.end:
                yield rank, match


def scan(text: str, detectors: Iterable[Detector] = SECRET_DETECTORS) -> list[Match]:
    """Every finding in ``text``, sorted, no two sharing a character.

    The detectors read the text as a person would (:func:`_skeleton`:
    invisible characters left out, look-alikes of ASCII folded to it), and
    read each run of base64 that encodes text once more, decoded: a secret
    found inside it is reported over the whole run.  Each finding covers the
    characters of ``text`` it was made of, invisible ones included."""
    every = tuple(detectors)
    seen, origin = _skeleton(text)
    found = list(_find(seen, every))
    for start, end in _base64_runs(seen):
        decoded = _decoded(seen[start:end])
        if decoded is not None:
            inside = {(rank, match.kind) for rank, match in _find(_skeleton(decoded)[0], every)}  # read as text is
            found += ((rank, Match(kind, start, end)) for rank, kind in sorted(inside))
    if origin is not None:
        found = [(rank, Match(m.kind, origin[m.start], origin[m.end - 1] + 1)) for rank, m in found]
    return _merge(found)


def redact(text: str, matches: Iterable[Match]) -> str:
    """``text`` with each finding replaced by ``[REDACTED:<kind>]``."""
    pieces: list[str] = []
    at = 0
    for match in _merge(enumerate(matches)):
        pieces += (text[at : match.start], f"[REDACTED:{match.kind}]")
        at = match.end
    pieces.append(text[at:])
    return "".join(pieces)


def describe(matches: Iterable[Match]) -> str:
    """What was found, in words and counts, never the values:
    ``"an Anthropic API key and 2 card numbers"``."""
    counts = Counter(m.kind for m in sorted(matches, key=lambda m: m.start))
    parts = []
    for kind, n in counts.items():
        one, many = _NAMES.get(kind) or (f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} value", f"{kind} values")
        parts.append(one if n == 1 else f"{n} {many}")
    if not parts:
        return "no secrets or personal data"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
