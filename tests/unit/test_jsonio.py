"""The one JSON reader/writer: JavaScript-compatible limits, and no other JSON codec anywhere in the layer."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from amsg import jsonio

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        '{"a":-Infinity}',
        "1e400",
        "-1e400",
        '{"metadata":{"x":1E999}}',
        "1" + "0" * 400,  # JSON.parse reads it as Infinity
        "-" + "9" * 309,
        "[" * 1500 + "]" * 1500,
        '{"a":' * 1500 + "1" + "}" * 1500,
        "[" * (jsonio.MAX_DEPTH + 1) + "]" * (jsonio.MAX_DEPTH + 1),
        "",
        "{",
        "[1,]",
        b"\xff\xfe",
    ],
)
def test_reader_rejects(text):
    with pytest.raises(jsonio.JsonError):
        jsonio.loads(text)


def test_reader_accepts_what_json_parse_reads_back_unchanged():
    depth = jsonio.MAX_DEPTH
    assert jsonio.loads("[" * depth + "]" * depth) is not None
    assert jsonio.loads('"[[[[' + "[" * 500 + '"') == "[[[[" + "[" * 500  # brackets inside strings do not count
    assert jsonio.loads('"\\"[[["') == '"[[['
    assert jsonio.loads("1e308") == 1e308
    assert jsonio.loads("9" * 300) == int("9" * 300)
    assert jsonio.loads('{"a":[1,2.5,null,true,"\\ud800"]}') == {"a": [1, 2.5, None, True, "\ud800"]}
    assert jsonio.loads(b'{"k":"\xc3\xa9"}') == {"k": "é"}


def test_writer_never_emits_nan_or_infinity():
    value = {"a": math.inf, "b": [-math.inf, math.nan, 1.5], "c": {"d": float("nan")}}
    text = jsonio.dumps(value)
    assert text == '{"a":null,"b":[null,null,1.5],"c":{"d":null}}'
    assert jsonio.loads(text)["b"][2] == 1.5


def test_writer_is_json_stringify():
    assert jsonio.dumps({"a": "é", "b": [1, None]}) == '{"a":"é","b":[1,null]}'
    text = jsonio.dumps({"s": "x\ud800y"})
    assert text == '{"s":"x\\ud800y"}'
    text.encode("utf-8")  # always encodable


def _json_codec_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == "json" for alias in node.names):
            found.append(f"{path.name}:{node.lineno} import json")
        elif isinstance(node, ast.ImportFrom) and node.module == "json":
            found.append(f"{path.name}:{node.lineno} from json import")
    return found


def test_no_json_codec_outside_jsonio():
    """Every JSON read and write of the service goes through amsg.jsonio (a stray json.loads would bring back
    NaN/Infinity, unbounded depth and 500s)."""
    sources = [*(ROOT / "layers/shared/amsg").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    offenders = [hit for path in sources if path.name != "jsonio.py" for hit in _json_codec_calls(path)]
    assert offenders == []
