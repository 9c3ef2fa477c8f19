"""Detection once per distinct text gives what searching every text each time gave, byte for byte.

:mod:`kernel.secrets` finds shapes with one RE2 set (which patterns occur) and then locates only those, and
keeps what it found and what it masked per distinct text. The reference here is the detector as it was before:
every shape's pattern run over every text, every time. Both must agree on every text of a corpus that holds
each shape (alone, repeated, overlapping, inside commands and JSON), before and after values are remembered.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kernel import secrets

SAMPLES = (
    "hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya",
    "ghp_" + "a" * 12 + "B1c2D3e4F5g6H7i8J9k0L1m2",
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop",
    "AKIA" + "IOSFODNN7EXAMPLF",
    'aws_secret_access_key = "' + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" + '"',
    "sk-" + "proj-" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7",
    "xoxb-" + "123456789012-abcdefghijKLMN",
    "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "glpat-" + "Ab3De6Gh9Jk2Mn5Pq8St",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "https://user:" + "s3cr3tPassw0rd" + "@example.com/path",
    "//registry.npmjs.org/:_authToken=" + "abcdef01-2345-6789-abcd-ef0123456789",
    "npm_" + "A" * 18 + "b" * 18,
    "pypi-" + "AgEIcHlwaS5vcmc" + "A" * 80,
    "Zm9v" * 21 + "Ab==",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "sq0csp-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG",
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + "Zm9vYmFy" * 11 + "==",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=" + "QmFy" * 8,
    "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=" + "AbCdEf0123456789%2B%2FxyZ",
    "abc8Q~" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Ab3De6",
    "Authorization: Bearer " + "abc.def-ghi_jkl~mno",
    "wandb login " + "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c",
    "-----BEGIN RSA PRIVATE KEY-----",
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
)
"""One text per shape (every kind :data:`secrets.SHAPES` names), and Azurite's published key, never a finding."""
PLAIN = ("torchrun --nproc_per_node 8 train.py", "azureml:gpu-a100", "", " ", "${{inputs.data}}",
         "TOKENIZERS_PARALLELISM", "caf\u00e9 \ud800 lone surrogate", "hunter22-Tr0ub4dor")


def corpus() -> Iterator[str]:
    """Every sample and plain text, alone, in pairs (both orders, with and without a space), repeated, in a
    command and quoted as JSON."""
    texts = SAMPLES + PLAIN
    yield from texts
    for a, b in itertools.permutations(texts[:12] + PLAIN[:3], 2):
        yield a + b
        yield f"{a} {b}"
    for text in texts:
        yield f"python train.py --token {text} && echo {text}"
        yield json.dumps({"value": text})
        yield text * 3


def reference_hits(text: str) -> list[secrets.Hit]:
    found = []
    for shape in secrets.SHAPES:
        for match in shape.pattern.finditer(text):
            start, end = match.span(shape.group)
            if start < end and secrets._real(shape, text[start:end]):
                found.append(secrets.Hit(shape.kind, start, end))
    return sorted(found, key=lambda h: (h.start, -h.end))


def reference_mask(text: str) -> str:
    for value in secrets._by_length:
        if value in text:
            text = text.replace(value, secrets.MASK)
    out, last = [], 0
    for hit in reference_hits(text):
        if hit.start >= last:
            out += [text[last:hit.start], secrets.MASK]
            last = hit.end
        elif hit.end > last:
            last = hit.end
    return "".join([*out, text[last:]])


def reference_judge(key: str, value: str) -> str | None:
    text = value.strip()
    if not text or secrets.is_reference(text) or any(p in text for p in secrets.PUBLISHED):
        return None
    found = reference_hits(text)
    if found:
        return "holds " + min(found, key=lambda h: secrets._ORDER[h.kind]).kind
    return secrets._judge_by_name(key, text)


def reference_hide(text: str, key: str = "") -> str:
    for secret in sorted({hidden for _, hidden, _ in secrets._found_in_value(key, text)}, key=len, reverse=True):
        text = text.replace(secret, secrets.MASK)
    return reference_mask(text)


def reference_mask_data(value: Any, path: tuple[str | int, ...] = ()) -> Any:
    """The masker without its per-leaf cache: the walk's verdict on each leaf (kernel.secrets.mask_data)."""
    if isinstance(value, dict):
        return {reference_hide(k): reference_mask_data(v, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [reference_mask_data(v, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, str):
        key = secrets._judged_name(path)
        whole = not secrets._has_space(value.strip()) and any(
            hidden == value.strip() for _, hidden, _ in secrets._found_in_value(key, value))
        return secrets.MASK if whole else reference_hide(value, key)
    return value


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    secrets.forget_all()
    yield
    secrets.forget_all()


def _assert_same_everywhere(texts: list[str]) -> None:
    for text in texts:
        for _ in range(2):  # the second time from the caches
            assert secrets.hits(text) == reference_hits(text), text
            assert secrets.mask(text) == reference_mask(text), text
            assert secrets.kind_in_bytes(text.encode("utf-8", "replace")) == (
                min(found, key=lambda h: secrets._ORDER[h.kind]).kind
                if (found := reference_hits(text.encode("utf-8", "replace").decode("latin-1"))) else None), text
    data = {"environment_variables": {"HF_TOKEN": texts[0], "WANDB_API_KEY": "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c",
                                      "DB_PASSWORD": "hunter22-Tr0ub4dor"},
            "command": texts, "tags": {text[:40]: text for text in texts}, "n": 3, "ok": True}
    for _ in range(2):
        assert secrets.mask_data(data) == reference_mask_data(data)
        for key, value in [("HF_TOKEN", texts[0]), *((text[:40], text) for text in texts)]:
            assert secrets.judge(key, value) == reference_judge(key, value), (key, value)


def test_set_search_and_caches_find_and_mask_what_every_pattern_over_every_text_did() -> None:
    texts = list(corpus())
    assert {hit.kind for text in SAMPLES for hit in reference_hits(text)} == {shape.kind for shape in secrets.SHAPES}
    assert any(not reference_hits(t) for t in texts)
    _assert_same_everywhere(texts)


def test_a_value_remembered_later_is_masked_in_a_text_masked_before() -> None:
    text = "python train.py --opaque hunter22-Tr0ub4dor"
    data = {"command": text, "note": "hunter22-Tr0ub4dor"}
    assert secrets.mask(text) == text and secrets.mask_data(data) == data  # cached as it was: nothing to hide
    secrets.remember("hunter22-Tr0ub4dor")
    assert secrets.mask(text) == "python train.py --opaque [secret]"
    assert secrets.mask_data(data) == {"command": "python train.py --opaque [secret]", "note": "[secret]"}
    _assert_same_everywhere(list(corpus())[:200])
    secrets.forget_all()
    assert secrets.mask(text) == text and secrets.mask_data(data) == data


def test_the_caches_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_CACHED", 8)
    for n in range(50):
        text = f"python train.py --seed {n}"
        assert secrets.mask(text) == text
        assert secrets.mask_data({"command": text}) == {"command": text}
        assert len(secrets._masked) <= 8 and len(secrets._masked_leaves) <= 8
    long_text = "x " * secrets._CACHED_LENGTH + SAMPLES[0]
    assert secrets.mask(long_text) == reference_mask(long_text) and long_text not in secrets._masked


def test_a_key_name_remembered_later_is_masked_in_a_document_masked_before() -> None:
    # Key names are hidden once per distinct name (kernel.secrets._hidden_keys): a remembered value forgets them.
    data = {"hunter22-Tr0ub4dor": {"plain": 1}, "plain": "x"}
    assert secrets.mask_data(data) == data
    secrets.remember("hunter22-Tr0ub4dor")
    assert secrets.mask_data(data) == {"[secret]": {"plain": 1}, "plain": "x"} == reference_mask_data(data)


@pytest.mark.parametrize(("key", "value"), [
    ("DB_PASSWORD", "hunter22-Tr0ub4dor"),  # a password name: the literal is the secret
    ("DB_HOST", "hunter22-Tr0ub4dor"),  # the same value under another name: nothing
    ("command", "python train.py --password hunter22-Tr0ub4dor"),
    ("command", "python train.py --host hunter22-Tr0ub4dor"),
    ("HF_TOKEN", SAMPLES[0]),
    ("", SAMPLES[0]),
])
def test_what_a_value_holds_is_kept_per_key_and_value(key: str, value: str) -> None:
    # kernel.secrets._in_value keeps its answer per (key, value): the same text under two names, asked in either
    # order and again, is judged under each name as the uncached walk judges it.
    for _ in range(2):
        for k in (key, "DB_HOST", "DB_PASSWORD", "command"):
            assert secrets._in_value(k, value) == tuple(secrets._found_in_value(k, value)), (k, value)
    assert secrets._in_value("DB_PASSWORD", "hunter22-Tr0ub4dor") != secrets._in_value("DB_HOST", "hunter22-Tr0ub4dor")


def test_the_key_name_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_CACHED", 8)
    for n in range(50):
        assert secrets.mask_data({f"key-{n}": n}) == {f"key-{n}": n}
        assert len(secrets._hidden_keys) <= 8
