import pytest

from worker.jsjson import js_json, js_len, js_number, js_sort_key


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1, "b": "x"}, '{"a":1,"b":"x"}'),
        ({"b": 1, "2": 2, "a": 3, "10": 4, "01": 5}, '{"2":2,"10":4,"b":1,"a":3,"01":5}'),
        ("é😀", '"é😀"'),
        ('q"\\', '"q\\"\\\\"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x01\x1f", '"\\u0001\\u001f"'),
        ("\ud800", '"\\ud800"'),
        ([1, None, True, False], "[1,null,true,false]"),
        (1.0, "1"),
        (0.00001, "0.00001"),
        (1e-7, "1e-7"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (-2.5, "-2.5"),
        (float("nan"), "null"),
        ({"nested": {"k": [1.5, "v"]}}, '{"nested":{"k":[1.5,"v"]}}'),
    ],
)
def test_js_json_matches_json_stringify(value: object, expected: str) -> None:
    assert js_json(value) == expected


@pytest.mark.parametrize(
    ("text", "length"),
    [
        ("", 0),
        ("abc", 3),
        ("é", 1),
        ("😀", 2),
        ("a😀b", 4),
        ("a\ud800", 2),  # a lone surrogate is one unit, as in JavaScript
    ],
)
def test_js_len_counts_utf16_units(text: str, length: int) -> None:
    assert js_len(text) == length


def test_js_sort_key_orders_by_utf16_code_units() -> None:
    # U+FF5E sorts after U+1F600 in code points but before it in UTF-16 (surrogates are 0xD8xx).
    assert sorted(["b", "A", "\uff5e", "😀"], key=js_sort_key) == ["A", "b", "😀", "\uff5e"]


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (123456789.0, "123456789"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
    ],
)
def test_js_number(number: float, text: str) -> None:
    assert js_number(number) == text


@pytest.mark.parametrize("start", range(0, 0x3000, 0x400))
def test_the_fast_string_path_escapes_as_the_char_by_char_one(start: int) -> None:
    from worker.jsjson import _escape_char

    text = "".join(chr(c) for c in range(start, start + 0x400)
                   if not 0xD800 <= c <= 0xDFFF) + "\n\"\\😀"
    assert js_json(text) == '"' + "".join(_escape_char(c) for c in text) + '"'


@pytest.mark.parametrize(
    ("value", "fast"),
    [
        ({"path": "src/a.py", "command": "ls -la\n", "n": 3, "ok": True, "none": None}, True),
        ({"q": 'say "hi"\\', "ctl": "\x00\x1f\x7f\u2028", "emoji": "😀é"}, True),
        ({"big": 2**70, "neg": -5}, True),
        ({}, True),
        ({"2": "index key first", "b": "x"}, False),  # JavaScript's key order
        ({"f": 1.0, "g": 1e21}, False),  # Number#toString
        ({"s": "lone \ud800 surrogate"}, False),  # escaped by JavaScript only
        ({"nested": {"k": "v"}}, False),
    ],
)
def test_a_flat_object_through_the_c_encoder_is_written_as_by_the_general_path(
        value: dict[str, object], fast: bool) -> None:
    # Beside the table above: the general path's answer is JSON.stringify's; the flat fast path
    # gives the same text, or leaves the object to the general path.
    from worker import jsjson

    general = "{" + ",".join(f"{jsjson._js_string(k)}:{js_json(value[k])}"
                             for k in jsjson.js_property_order(value)) + "}"
    assert js_json(value) == general
    flat = jsjson._flat_json(value)
    assert (flat is not None) == fast
    assert flat is None or flat == general
