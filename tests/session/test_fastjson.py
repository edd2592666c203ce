"""``api_client.session._fastjson.loads``: what ``json.loads`` returns and raises, faster."""

import json
import random
from pathlib import Path

import pytest

from api_client.session._fastjson import loads


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [true, false, null], "c": {"d": "e"}}',
        '{"big": 123456789012345678901234567890, "neg": -18446744073709551617}',
        '{"a": 1, "a": 2}',  # the last duplicate wins
        '{"x": -0.0, "y": 1e-320, "z": 1.7976931348623157e308, "w": 0.1}',
        '{"s": "\\u00e9\\ud83d\\ude00 \\/ \\" \\\\ \\n"}',
        '{"lone": "\\ud800 and \\udfff"}',  # lone surrogate escapes: msgspec refuses them
        '{"n": NaN, "i": Infinity, "m": -Infinity}',  # beyond RFC 8259
        '{"huge": 1e400}',  # beyond a double: inf
        '  {"padded": 1}  ',
        "[1, 2]",
        '"just a string"',
    ],
)
def test_values_are_the_standard_parsers(text: str) -> None:
    expected = json.loads(text)
    got = loads(text)
    assert repr(got) == repr(expected)  # repr: NaN != NaN, and -0.0 == 0.0
    assert json.dumps(got) == json.dumps(expected)


@pytest.mark.parametrize(
    "text",
    ['{"a": 1,}', "[1,]", '{"a": 1} x', '"a\x01b"', '"\\x41"', "01", "{bad", "", '{"a": "'],
)
def test_malformed_json_raises_the_standard_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as standard:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as ours:
        loads(text)
    assert ours.value.msg == standard.value.msg


def test_generated_numbers_are_equal_to_the_last_bit() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        x = rng.choice([rng.random() * 10 ** rng.randint(-300, 300),
                        rng.uniform(-1e307, 1e307), rng.getrandbits(64) / 3])
        for text in (repr(x), f"{x:.17g}", f"{x:.3e}", str(rng.getrandbits(200) - 2**199)):
            assert repr(loads(text)) == repr(json.loads(text)), text


def test_the_reference_sessions_parse_as_before(pi_file: Path) -> None:
    lines = [line for line in pi_file.read_text(encoding="utf-8").splitlines() if line]
    assert [loads(line) for line in lines] == [json.loads(line) for line in lines]
