"""``util.contract_check``: ``check_entry`` names what an installed library lacks (a module, an attribute,
a parameter, an inspectable signature), ``check_class_fields`` a class's missing fields, ``parse_entries``
reads entries written one per line."""

from __future__ import annotations

import pytest

from sglang_dspark_plugin.util.contract_check import check_class_fields, check_entry, parse_entries


def test_present_entries_pass() -> None:
    assert check_entry("json", "dumps", ("obj", "indent")).ok
    assert check_entry("json", "JSONDecoder.decode", ("s",)).ok
    assert check_entry("json", "JSONDecoder", None).ok  # existence only


def test_each_kind_of_missing_is_named() -> None:
    gone = check_entry("json", "dumps", ("obj", "no_such_parameter"))
    assert not gone.ok and "lacks parameter(s) no_such_parameter" in gone.problem
    assert check_entry("json", "no_such_function", None).problem == "missing"
    moved = check_entry("no_such_module_anywhere", "thing", None)
    assert not moved.ok and moved.problem.startswith("module does not import")
    assert check_entry("builtins", "dict.get", ("key",)).ok  # a builtin with a text signature
    opaque = check_entry("builtins", "max", ("key",))  # a builtin without one: named, not guessed
    assert not opaque.ok and opaque.problem.startswith("no inspectable signature")
    assert gone.target == "json.dumps" and gone.to_json()["params"] == ["obj", "no_such_parameter"]


def test_entries_are_read_one_per_line_under_their_module() -> None:
    entries = parse_entries(
        """
        json:
            dumps(obj, indent)  # those parameter names
            JSONDecoder.decode()
            JSONDecoder
        collections:
            OrderedDict.move_to_end(key,
                last)
        """
    )
    assert entries == [
        ("json", "dumps", ("obj", "indent")),
        ("json", "JSONDecoder.decode", ()),
        ("json", "JSONDecoder", None),
        ("collections", "OrderedDict.move_to_end", ("key", "last")),
    ]
    assert all(check_entry(*entry).ok for entry in entries)
    with pytest.raises(ValueError, match="before any module"):
        parse_entries("dumps(obj)")
    with pytest.raises(ValueError, match="not closed"):
        parse_entries("json:\n    dumps(obj,")


def test_fields_are_checked_one_by_one() -> None:
    statuses = check_class_fields("argparse", "Namespace", ("__init__", "no_such_field"))
    assert [(s.qualname, s.ok, s.problem) for s in statuses] == [
        ("Namespace.__init__", True, ""),
        ("Namespace.no_such_field", False, "missing"),
    ]
    dataclass_fields = check_class_fields(
        "sglang_dspark_plugin.serving.request", "LaunchRequest", ("draft", "device")
    )
    assert [s.ok for s in dataclass_fields] == [True, False]  # a dataclass: its fields, not its attributes
    assert check_class_fields("no_such_module_anywhere", "Thing", ("x",)) == []
