import pytest

from worker.tokens.jsjson import js_json, js_len, js_number, js_sort_key


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
    from worker.tokens.jsjson import _escape_char

    text = "".join(chr(c) for c in range(start, start + 0x400)
                   if not 0xD800 <= c <= 0xDFFF) + "\n\"\\😀"
    assert js_json(text) == '"' + "".join(_escape_char(c) for c in text) + '"'
