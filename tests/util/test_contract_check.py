"""``util.contract_check.check_entry`` names what an installed library lacks: a module, an attribute, a
parameter, an inspectable signature."""

from __future__ import annotations

from sglang_dspark_plugin.util.contract_check import check_entry


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
    builtin = check_entry("builtins", "dict.get", ("key",))
    assert builtin.ok or "no inspectable signature" in builtin.problem
    assert gone.target == "json.dumps" and gone.to_json()["params"] == ["obj", "no_such_parameter"]
