"""``util.signatures``: a routed ``__init__(*args, **kwargs)`` reports and binds its parent's signature."""

from __future__ import annotations

import inspect

import pytest

from sglang_dspark_plugin.util.signatures import bound_argument, signature_of


class Parent:
    def __init__(self, server_args: str, gpu_id: int, *, port: int = 0) -> None:
        self.seen = (server_args, gpu_id, port)


class Routed(Parent):
    @signature_of(Parent.__init__)
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.routed = bound_argument(self, "server_args", args, kwargs)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def test_the_routed_init_reports_and_binds_the_parents_signature() -> None:
    assert inspect.signature(Routed.__init__) == inspect.signature(Parent.__init__)
    positional, keyword = Routed("a", 1, port=2), Routed(gpu_id=3, server_args="b")
    assert (positional.routed, positional.seen) == ("a", ("a", 1, 2))
    assert (keyword.routed, keyword.seen) == ("b", ("b", 3, 0))
    with pytest.raises(TypeError):  # a call the parent's signature does not bind, before anything runs
        Routed("a", 1, no_such_argument=True)
