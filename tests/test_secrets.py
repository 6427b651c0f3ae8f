"""The write filter's detectors (vaultmem.secrets): pure functions, no vault.

Every token below is fake: generated with the right prefix and length, or a
published test value (card test numbers, the IBAN registry's examples).  The
corpus tests at the end pin the measured rates: no finding at all in the
ordinary corpus, every listed kind found in the secrets corpus.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem import VaultError
from vaultmem.core.detectors import (
    KINDS,
    PERSONAL_DETECTORS,
    SECRET_DETECTORS,
    Detector,
    Match,
    RegexDetector,
    describe,
    detectors,
    iban_ok,
    luhn_ok,
    redact,
    scan,
)

CORPUS = Path(__file__).parent / "corpus"
ORDINARY = sorted((CORPUS / "ordinary").iterdir())
SECRET_FILES = sorted((CORPUS / "secrets").iterdir())
ALL = detectors(personal_data=True)


def found(text: str, dets: tuple[Detector, ...] = SECRET_DETECTORS) -> list[tuple[str, str]]:
    return [(m.kind, text[m.start : m.end]) for m in scan(text, dets)]


def rnd(n: int, alphabet: str = string.ascii_letters + string.digits, seed: int = 7) -> str:
    r = random.Random(seed)
    return "".join(r.choice(alphabet) for _ in range(n))


HEX = "0123456789abcdef"
ANTHROPIC = "sk-ant-api03-" + rnd(93, string.ascii_letters + string.digits + "_-") + "AA"
GHP = "ghp_" + rnd(36)


# -- one detector at a time: what it finds, exactly --------------------------------

POSITIVES = [
    ("anthropic_api_key", f"ANTHROPIC_API_KEY={ANTHROPIC}\n", ANTHROPIC),
    ("anthropic_api_key", "key: sk-ant-admin01-" + rnd(60, seed=1), "sk-ant-admin01-" + rnd(60, seed=1)),
    ("openai_api_key", "sk-proj-" + rnd(80, seed=2), "sk-proj-" + rnd(80, seed=2)),
    ("openai_api_key", "legacy key sk-" + rnd(48, seed=3) + ".", "sk-" + rnd(48, seed=3)),
    ("openai_api_key", "sk-svcacct-" + rnd(50, seed=4), "sk-svcacct-" + rnd(50, seed=4)),
    ("aws_access_key_id", "id AKIAZ4K7QW2LMN8PRT5V here", "AKIAZ4K7QW2LMN8PRT5V"),
    ("aws_access_key_id", '"AccessKeyId": "ASIAHIA6YD7KDSUTAJB5"', "ASIAHIA6YD7KDSUTAJB5"),
    (
        "aws_secret_access_key",
        "aws_secret_access_key = wJ8rXUtnFEMI/K7MDENG/bPxRfiCY9xq3Lm2ZpT4",
        "wJ8rXUtnFEMI/K7MDENG/bPxRfiCY9xq3Lm2ZpT4",
    ),
    (
        "aws_secret_access_key",
        '"SecretAccessKey": "+x/2p6xIfLayj8pGHKShoiJk/joAvapT+eiR1ogb"',
        "+x/2p6xIfLayj8pGHKShoiJk/joAvapT+eiR1ogb",
    ),
    ("github_token", f"export GH_TOKEN={GHP}", GHP),
    ("github_token", "github_pat_11" + rnd(80, seed=5), "github_pat_11" + rnd(80, seed=5)),
    ("gitlab_token", "token glpat-Xk9mQ2vR7tB4nL8pW3sZ ok", "glpat-Xk9mQ2vR7tB4nL8pW3sZ"),
    ("slack_token", "xoxb-2384759823-2938475982374-aB3dE5fG7hJ9kL1mN3pQ5rS7", None),
    (
        "slack_webhook",
        "hook: https://hooks.slack.com/services/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",
        "T04AB2CDE/B05FG6HIJ/aB3dE5fG7hJ9kL1mN3pQ5rS7",
    ),
    ("stripe_key", "sk_live_51" + rnd(40, seed=6), None),
    ("stripe_key", "rk_test_51" + rnd(40, seed=6), None),
    ("google_api_key", "?key=AIza" + rnd(35, seed=8) + "&callback=x", "AIza" + rnd(35, seed=8)),
    ("twilio_api_key", "TWILIO_API_KEY SK" + rnd(32, HEX, seed=9), "SK" + rnd(32, HEX, seed=9)),
    ("sendgrid_api_key", "SG." + rnd(22, seed=10) + "." + rnd(43, seed=11), None),
    ("npm_token", "//registry.npmjs.org/:_authToken=npm_" + rnd(36, seed=12), "npm_" + rnd(36, seed=12)),
    ("huggingface_token", 'login(token="hf_' + rnd(34, seed=13) + '")', "hf_" + rnd(34, seed=13)),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        None,
    ),
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----\nafter",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
    ),
    ("private_key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQ\n-----END PGP PRIVATE KEY BLOCK-----", None),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn (cut off)", "-----BEGIN OPENSSH PRIVATE KEY-----"),
    ("card_number", "card 4111 1111 1111 1111 exp 09/27", "4111 1111 1111 1111"),
    ("card_number", "4242-4242-4242-4242", None),
    ("card_number", "amex 378282246310005.", "378282246310005"),
    ("card_number", "amex 3782 822463 10005", "3782 822463 10005"),
    ("card_number", "mc 2223003122003222", "2223003122003222"),
    ("card_number", "diners 3056 930902 5904", "3056 930902 5904"),
    ("card_number", "card=5105105105105100", "5105105105105100"),
    ("iban", "IBAN GB82 WEST 1234 5698 7654 32, thanks", "GB82 WEST 1234 5698 7654 32"),
    ("iban", "DE89370400440532013000", None),
    ("iban", "BE71 0961 2345 6769 SWIFT GEBABEBB", "BE71 0961 2345 6769"),
    ("iban", "FR14 2004 1010 0505 0001 3M02 606", None),
    ("us_ssn", "SSN: 512-44-8391", "512-44-8391"),
    ("uk_nino", "NI number JG 10 37 25 D.", "JG 10 37 25 D"),
    ("uk_nino", "NINO PX123456B", "PX123456B"),
    ("bearer_token", "-H 'Authorization: Bearer 8f3kLm29QpXz7Vt4Rw1Ny6Hs'", "8f3kLm29QpXz7Vt4Rw1Ny6Hs"),
    ("basic_auth", "Authorization: Basic c3ZjOlRyMHViNGRvciYz", "c3ZjOlRyMHViNGRvciYz"),
    ("url_password", "postgres://app:S3cr3t!x@db:5432/app", "S3cr3t!x"),
    ("labelled_secret", "password: hunter2", "hunter2"),
    ("labelled_secret", 'api_key="9f8e7d6c5b4a3210fedc"', "9f8e7d6c5b4a3210fedc"),
    ("labelled_secret", "DB_PASSWORD=Xk9#mQ2vR7", "Xk9#mQ2vR7"),
    ("labelled_secret", '"clientSecret": "Tq8vZ2mXr4LpW9sK"', "Tq8vZ2mXr4LpW9sK"),
    ("labelled_secret", "settings['api_key'] = 'a81f2c9e77d04b6b'", "a81f2c9e77d04b6b"),
    ("labelled_secret", "$db['password'] => 'S3cur3Pa55';", "S3cur3Pa55"),
    ("labelled_secret", 'token := "tk_4f9a8b7c6d5e"', "tk_4f9a8b7c6d5e"),
]


@pytest.mark.parametrize(("kind", "text", "value"), POSITIVES)
def test_each_detector_finds_its_kind_exactly(kind, text, value):
    assert found(text) == [(kind, value if value is not None else text)]


NEGATIVES = [
    # cards: Luhn, prefixes, longer runs, decimals, IDs
    "card 4111 1111 1111 1112",
    "order 4532015112830367 shipped",
    "41111111111111110000",
    "batch 1234 5678 9012 3456",
    "pi ≈ 0.4111111111111111",
    "ORD-4111111111111111",
    "#4111111111111111",
    "4111 1111 1111 1111 1111",
    "4111-1111 1111-1111",
    "tel +4111111111111111",
    "epoch ms 1710435720123 and ns 1710435720123456789",
    "2024-01-15 2024-01-16 2024-01-17",
    # IBANs: check digits, length, unknown country, lowercase
    "GB83 WEST 1234 5698 7654 32",
    "GB82 WEST 1234 5698 7654 3",
    "XX82 WEST 1234 5698 7654 32",
    "gb82 west 1234 5698 7654 32",
    # SSNs: the invalid areas, groups and serials; other dash shapes
    "000-12-3456",
    "666-12-3456",
    "912-34-5678",
    "123-00-4567",
    "123-45-0000",
    "978-0-306-40615-7",
    "part 1234-56-7890",
    # UK NINO: prefixes HMRC never issues, bad suffix
    "QQ 12 34 56 C",
    "BG 12 34 56 A",
    "GB123456A",
    "AB 12 34 56 E",
    "DA123456A",
    # hashes, ids and blobs
    "commit 7c1e9a04d2b8f6e3a5c7d9b1f2e4a6c8d0b3e5f7",
    "id 3f1c9a2e-7b4d-4e8a-9c0f-5d2b1a6e8f47",
    "sha256:90f8795536170fd08236d2ceb74fe7065dbf74f738d8b84bfbf263656654dc9b",
    "integrity sha512-" + rnd(86, string.ascii_letters + string.digits + "+/") + "==",
    "data:image/png;base64," + rnd(400, string.ascii_letters + string.digits + "+/"),
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + rnd(43) + " tomasz@laptop",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
    # key prefixes in prose and placeholders
    "our keys start with sk- followed by random characters",
    "Anthropic keys look like sk-ant-api03-...",
    "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "SK" + "0" * 32,
    "Authorization: Bearer YOUR_API_KEY",
    "Authorization: Bearer <token>",
    "Authorization: Bearer ${TOKEN}",
    'headers={"Authorization": f"Bearer {token}"}',
    # labels without a secret after them
    "password: ${DB_PASSWORD}",
    "password=<your password>",
    "API_KEY=<your key here>",
    "api_key = os.environ['API_KEY']",
    "password = args.password",
    "token: str",
    "max_tokens: 4096",
    "next_page_token: CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA5ZTByXzEQAA",
    "Reset your password from the settings page.",
    "Password: must be at least 12 characters",
    "the token: a short-lived credential",
    "secret: db-creds-prod",
    "secretName: api-tls",
    "password: changeme",
    "password: ********",
    "POSTGRES_PASSWORD=postgres",
    "password: !vault |",
    "pwd: /home/alice/projects",
    "mysecret: abc123def456",
    '"clientSecret": "my-app-secret-name"',
    'data["password"] = request.form["password"]',
    'SECRET_KEY = "DJANGO_SECRET_KEY"',
    "postgres://postgres:postgres@localhost:5432/app",
    "postgres://app:${DB_PASSWORD}@db:5432/app",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_near_misses_and_ordinary_look_alikes_are_not_reported(text):
    assert found(text) == []


def test_the_order_number_near_miss_really_fails_luhn():
    assert not luhn_ok("4532015112830367")


def test_a_key_glued_inside_a_longer_token_is_not_a_key():
    assert found("xsk-ant-api03-" + rnd(60)) == []
    assert found("prefix_" + GHP) == []
    assert found(GHP + "-x") == []


def test_a_private_key_without_end_stops_at_its_header_line():
    text = "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----BEGIN RSA PRIVATE KEY-----\nMII\n-----END RSA PRIVATE KEY-----\n"
    assert found(text) == [
        ("private_key", "-----BEGIN EC PRIVATE KEY-----"),
        ("private_key", "-----BEGIN RSA PRIVATE KEY-----\nMII\n-----END RSA PRIVATE KEY-----"),
    ]


def test_a_private_key_escaped_in_json_is_covered_to_its_end():
    text = '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n", "x": 1}'
    assert found(text) == [("private_key", "-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----")]


def test_a_labelled_token_inside_a_url_is_the_url_password():
    text = f"https://x-access-token:{GHP}@github.com/acme/api.git"
    assert found(text) == [("github_token", GHP)]


# -- personal data, only when asked ------------------------------------------------------

PERSONAL_POSITIVES = [
    ("email", "write to jane.doe@northwind-health.co.uk today", "jane.doe@northwind-health.co.uk"),
    ("email", "mailto:bob@acme-mail.io.", "bob@acme-mail.io"),
    ("phone", "call +44 20 7946 0958 now", "+44 20 7946 0958"),
    ("phone", "+14155552671", "+14155552671"),
    ("phone", "+1 (555) 123-4567", "+1 (555) 123-4567"),
    ("phone", "+49 (0)30 1234567", "+49 (0)30 1234567"),
    ("phone", "(555) 123-4567", "(555) 123-4567"),
    ("phone", "555-123-4567", "555-123-4567"),
    ("phone", "555.123.4567", "555.123.4567"),
    ("phone", "mobile 07700 900123", "07700 900123"),
]


@pytest.mark.parametrize(("kind", "text", "value"), PERSONAL_POSITIVES)
def test_personal_data_is_found_when_asked(kind, text, value):
    assert found(text, ALL) == [(kind, value)]
    assert found(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "jane@example.com",
        "ops@mail.example.org",
        "user@host.test",
        "git@github.com:acme/api.git",
        "https://deploy@gitlab.acme-mail.io/x",
        "react@18.2.0",
        "@app.route('/')",
        "v1.2.3 and 10.0.0.1 and 192.168.100.1",
        "2024-01-15 10:30",
        "+12500000",
        "+3.14159265",
        "+05:30",
        "ext. 4412",
        "0800 123 4567",
        "123-456-7890",
        "1234567890",
        "IPv6 2001:db8::1 and MAC 00:1a:2b:3c:4d:5e",
    ],
)
def test_personal_look_alikes_are_not_reported(text):
    assert found(text, ALL) == []


# -- checksums -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number", ["4111111111111111", "4242 4242 4242 4242", "5555-5555-5555-4444", "378282246310005", "79927398713"]
)
def test_luhn_ok_accepts_valid_numbers(number):
    assert luhn_ok(number)


@pytest.mark.parametrize(
    "number", ["4111111111111112", "79927398710", "", "0", "4111x1111", "４１１１１１１１１１１１１１１１"]
)
def test_luhn_ok_rejects_invalid_numbers(number):
    assert not luhn_ok(number)


@pytest.mark.parametrize(
    "iban",
    ["GB82 WEST 1234 5698 7654 32", "GB82WEST12345698765432", "DE89 3704 0044 0532 0130 00", "NO9386011117947",
     "gb82 west 1234 5698 7654 32", "LC55HEMM000100010012001200023015"],
)  # fmt: skip
def test_iban_ok_accepts_registry_examples(iban):
    assert iban_ok(iban)


@pytest.mark.parametrize(
    "iban", ["GB83 WEST 1234 5698 7654 32", "GB82 WEST 1234 5698 7654 3", "XX82WEST12345698765432", "GB", "GBAB"]
)
def test_iban_ok_rejects_bad_check_digits_lengths_and_countries(iban):
    assert not iban_ok(iban)


# -- custom detectors --------------------------------------------------------------------


def test_custom_patterns_become_detectors():
    dets = detectors(patterns={"employee_id": r"\bEMP-\d{6}\b"})
    assert found("ask EMP-004211 about it", dets) == [("employee_id", "EMP-004211")]
    assert describe(scan("EMP-000001 EMP-000002", dets)) == "2 employee_id values"


def test_custom_patterns_come_after_the_built_ins():
    dets = detectors(personal_data=True, patterns={"ticket": "T-1"})
    assert dets[: len(SECRET_DETECTORS)] == SECRET_DETECTORS
    assert dets[len(SECRET_DETECTORS) : -1] == PERSONAL_DETECTORS
    assert dets[-1].kind == "ticket"


def test_a_hand_written_detector_joins_through_extra():
    class ProjectCodename:
        kind = "codename"

        def find(self, text: str) -> Iterator[Match]:
            at = text.find("BLUEBIRD")
            if at >= 0:
                yield Match(self.kind, at, at + 8)

    dets = detectors(extra=[ProjectCodename()])
    assert found("launch BLUEBIRD on Friday", dets) == [("codename", "BLUEBIRD")]
    assert redact("launch BLUEBIRD", scan("launch BLUEBIRD", dets)) == "launch [REDACTED:codename]"
    assert describe(scan("BLUEBIRD", dets)) == "a codename value"


def test_regex_detector_reports_the_group_that_passes_validate():
    det = RegexDetector("pin", r"PIN[: ]+(?P<pin>\d{4,6})", lambda v: v != "0000", group="pin")
    text = "PIN: 0000, PIN 4821"
    assert [(m.kind, text[m.start : m.end]) for m in det.find(text)] == [("pin", "4821")]


def test_regex_detector_accepts_a_compiled_pattern_and_skips_empty_matches():
    det = RegexDetector("maybe", re.compile(r"x*"))
    assert [(m.start, m.end) for m in det.find("axxb")] == [(1, 3)]


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        ({"employee_id": "EMP-(\\d"}, "Error: the pattern for 'employee_id' is not a valid regular expression"),
        ({"Employee": "EMP"}, "Error: pattern kind 'Employee' must be lowercase letters"),
        ({"1abc": "EMP"}, "Error: pattern kind '1abc' must be lowercase letters"),
        ({"a" * 41: "EMP"}, "must be lowercase letters, digits and _ (at most 40)"),
        ({"x-y": "EMP"}, "Error: pattern kind 'x-y'"),
        ({"employee_id": ""}, "Error: the pattern for 'employee_id' must be a non-empty regular expression"),
        ({"employee_id": 42}, "Error: the pattern for 'employee_id' must be a non-empty regular expression"),
        ({"anything": "a*"}, "Error: the pattern for 'anything' matches empty text"),
    ],
)
def test_bad_custom_patterns_are_refused_with_a_clear_error(patterns, message):
    with pytest.raises(VaultError) as err:
        detectors(patterns=patterns)
    assert str(err.value).startswith("Error: ")
    assert message in str(err.value)


def test_a_regex_detector_with_a_missing_group_is_refused():
    with pytest.raises(VaultError, match="has no group 'value'"):
        RegexDetector("x", r"abc", group="value")
    with pytest.raises(VaultError, match="has no group 2"):
        RegexDetector("x", r"(a)bc", group=2)


def test_something_that_is_not_a_detector_is_refused():
    with pytest.raises(VaultError, match="is not a detector"):
        detectors(extra=[object()])  # type: ignore[list-item]


def test_a_detector_reporting_outside_the_text_is_an_error():
    class Broken:
        kind = "broken"

        def find(self, text: str) -> list[Match]:
            return [Match(self.kind, 0, len(text) + 5)]

    with pytest.raises(VaultError, match="'broken' detector reported a match outside the text"):
        scan("abc", [Broken()])


# -- merging, redacting, describing -----------------------------------------------------------


class Fixed:
    """A detector that reports given spans, to pin the merge rules."""

    def __init__(self, kind: str, *spans: tuple[int, int]) -> None:
        self.kind = kind
        self.spans = spans

    def find(self, text: str) -> list[Match]:
        return [Match(self.kind, s, e) for s, e in self.spans]


def test_scan_sorts_by_start():
    assert scan("x" * 30, [Fixed("b", (20, 25)), Fixed("a", (2, 4), (10, 12))]) == [
        Match("a", 2, 4),
        Match("a", 10, 12),
        Match("b", 20, 25),
    ]


def test_overlaps_keep_the_earliest_starting_longest_and_cover_every_character():
    text = "x" * 40
    matches = scan(
        text, [Fixed("short", (5, 8)), Fixed("long", (5, 15)), Fixed("tail", (12, 20)), Fixed("own", (20, 22))]
    )
    assert matches == [Match("long", 5, 20), Match("own", 20, 22)]


def test_equal_spans_go_to_the_earlier_detector():
    assert scan("x" * 10, [Fixed("specific", (1, 5)), Fixed("generic", (1, 5))]) == [Match("specific", 1, 5)]
    text = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3"
    assert [m.kind for m in scan(text)] == ["jwt"]


def test_an_api_key_after_a_label_is_named_by_its_provider():
    assert found(f"api_key: {ANTHROPIC}") == [("anthropic_api_key", ANTHROPIC)]


def test_redact_replaces_each_match_with_its_kind():
    text = f"key {ANTHROPIC} and card 4111 1111 1111 1111, IBAN GB82WEST12345698765432."
    assert redact(text, scan(text)) == (
        "key [REDACTED:anthropic_api_key] and card [REDACTED:card_number], IBAN [REDACTED:iban]."
    )


def test_redact_keeps_the_label_readable():
    assert redact("password: hunter2\n", scan("password: hunter2\n")) == "password: [REDACTED:labelled_secret]\n"


def test_redact_merges_overlapping_matches_it_is_given():
    assert redact("abcdefghij", [Match("b", 4, 8), Match("a", 2, 6)]) == "ab[REDACTED:a]ij"


def test_redact_with_no_matches_returns_the_text():
    assert redact("nothing here", []) == "nothing here"


def test_describe_counts_kinds_in_order_of_appearance_without_values():
    text = f"card 4111 1111 1111 1111 then {ANTHROPIC} then 5555 5555 5555 4444"
    summary = describe(scan(text))
    assert summary == "2 card numbers and an Anthropic API key"
    assert "4111" not in summary and "sk-ant" not in summary


@pytest.mark.parametrize(
    ("kinds", "summary"),
    [
        (["anthropic_api_key", "card_number", "card_number"], "an Anthropic API key and 2 card numbers"),
        (["iban"], "an IBAN"),
        (["email", "phone", "email", "us_ssn"], "2 e-mail addresses, a phone number and a US Social Security number"),
        (["private_key", "private_key", "private_key"], "3 private keys"),
        (["jwt", "labelled_secret", "labelled_secret"], "a JSON Web Token and 2 labelled passwords or secrets"),
        (["order_ref"], "an order_ref value"),
        ([], "no secrets or personal data"),
    ],
)
def test_describe_wording(kinds, summary):
    assert describe([Match(kind, i, i + 1) for i, kind in enumerate(kinds)]) == summary


def test_every_kind_has_words_and_a_detector():
    built_in = {d.kind for d in SECRET_DETECTORS + PERSONAL_DETECTORS}
    assert built_in == set(KINDS)
    for kind, words in KINDS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,39}", kind)
        assert words.startswith(("a ", "an ")), words


def test_match_is_immutable():
    with pytest.raises(AttributeError):
        Match("x", 0, 1).start = 3  # type: ignore[misc]


# -- no catastrophic backtracking: these must simply finish ---------------------------------

_RNG = random.Random(20240314)
ADVERSARIAL = {
    "digits, spaces and dashes": "".join(_RNG.choice("0123456789 -") for _ in range(100_000)),
    "one digit run": "4" * 100_000,
    "card-like groups": "4111 " * 20_000,
    "base64-ish": "".join(_RNG.choice(string.ascii_letters + string.digits + "+/=") for _ in range(100_000)),
    "base64url-ish with dots": "".join(
        _RNG.choice(string.ascii_letters + string.digits + "-_.") for _ in range(100_000)
    ),
    "uppercase and digits": "".join(_RNG.choice(string.ascii_uppercase + string.digits + " ") for _ in range(100_000)),
    "jwt prefixes": "eyJ" * 33_000,
    "key prefixes": "sk-ant-" * 14_000,
    "key headers without footers": "-----BEGIN PRIVATE KEY-----\n" * 3_500,
    "labels": "password=" * 11_000,
    "labels and colons": "token: " * 14_000,
    "at signs": "a@" * 50_000,
    "dotted at signs": "a.b@c.d." * 12_000,
    "plus signs": "+1 " * 33_000,
    "url user info": "://a:b" * 16_000,
    "base64 of text, many short runs": "aGVsbG8gdGhlcmUgZnJpZW5kISE= " * 3_500,
    "base64 of labels, one long run": "cGFzc3dvcmQ9" * 8_000,
    "invisible characters between digits": "4\u200b" * 50_000,
    "fullwidth digits and spaces": "\uff14\u3000" * 50_000,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_scan_finishes_on_adversarial_input(name):
    text = ADVERSARIAL[name]
    matches = scan(text, ALL)
    assert all(0 <= m.start < m.end <= len(text) for m in matches)


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=string.printable + "é€—", max_size=400))
def test_scan_returns_sorted_disjoint_matches_and_redaction_removes_them(text):
    matches = scan(text, ALL)
    assert all(a.end <= b.start for a, b in itertools.pairwise(matches))
    redacted = redact(text, matches)
    for m in matches:
        assert f"[REDACTED:{m.kind}]" in redacted


@settings(max_examples=examples(100), deadline=None)
@given(st.sampled_from(["4111111111111111", "5555555555554444", "378282246310005"]), st.text("abc .,:;\n", max_size=20))
def test_a_card_number_is_found_wherever_it_sits_in_prose(number, around):
    text = f"{around} {number} {around}"
    assert [m.kind for m in scan(text)] == ["card_number"]


# -- the corpus: the rates the docs quote ---------------------------------------------------------


def expected_kinds(path: Path) -> set[str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("expect: "), f"{path.name} must start with an 'expect:' line"
    return set(first.removeprefix("expect: ").split())


def test_the_corpus_is_big_enough_to_mean_something():
    assert len(ORDINARY) >= 60
    assert len(SECRET_FILES) >= 40
    covered = set().union(*(expected_kinds(p) for p in SECRET_FILES))
    assert covered == set(KINDS), f"kinds without a corpus file: {set(KINDS) - covered}"


def flagged_lines(text: str, matches: list[Match]) -> set[int]:
    return {n for m in matches for n in range(text.count("\n", 0, m.start), text.count("\n", 0, m.end) + 1)}


def test_no_false_positives_in_the_ordinary_corpus():
    files_hit: dict[str, list[tuple[str, str]]] = {}
    lines = hit_lines = 0
    for path in ORDINARY:
        text = path.read_text()
        matches = scan(text, detectors(personal_data=False))
        lines += len(text.splitlines())
        hit_lines += len(flagged_lines(text, matches))
        if matches:
            files_hit[path.name] = [(m.kind, text[m.start : m.end]) for m in matches]
    file_rate = len(files_hit) / len(ORDINARY)
    line_rate = hit_lines / lines
    assert files_hit == {}
    assert file_rate == 0
    assert line_rate == 0


def test_personal_data_in_the_ordinary_corpus_only_where_a_file_means_it():
    personal_files = [p for p in ORDINARY if p.name.startswith("personal-")]
    assert personal_files, "the corpus should hold some deliberately personal files"
    for path in ORDINARY:
        text = path.read_text()
        kinds = {m.kind for m in scan(text, ALL)}
        if path.name.startswith("personal-"):
            assert kinds and kinds <= {"email", "phone"}, path.name
        else:
            assert kinds == set(), (path.name, found(text, ALL))


@pytest.mark.parametrize("path", SECRET_FILES, ids=lambda p: p.stem)
def test_every_listed_kind_is_found_in_each_secrets_file(path):
    text = path.read_text()
    kinds = {m.kind for m in scan(text, ALL)}
    assert kinds == expected_kinds(path)


@pytest.mark.parametrize("path", SECRET_FILES, ids=lambda p: p.stem)
def test_redacting_a_secrets_file_leaves_nothing_to_find(path):
    text = path.read_text()
    cleaned = redact(text, scan(text, ALL))
    assert scan(cleaned, ALL) == []


def test_an_iban_is_checked_by_its_country_rules_too() -> None:
    """python-stdnum checks a country's own account format and check digits
    after mod-97: Belgium's classic documentation example passes mod-97 but
    not Belgium's own check, so it is no account; a real one is found."""
    assert not iban_ok("BE68 5390 0754 7034")
    assert iban_ok("BE71 0961 2345 6769")
    assert [m.kind for m in scan("pay to BE71 0961 2345 6769 today")] == ["iban"]
