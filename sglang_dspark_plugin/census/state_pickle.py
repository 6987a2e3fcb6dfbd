"""A training state's ``data.pkl`` unpickled within budgets, as ``torch.save`` writes it and no more.

The C unpickler allocates whatever an opcode claims before it reads the claim's bytes (``BINBYTES8``
of 2**62, a memo index of 2**32) and builds any number of nested containers from a byte each. So the
pure-Python unpickler runs instead, one opcode at a time, each counted: at most ``MAX_OPS`` opcodes,
at most ``MAX_STACK`` items (marks included) on the stack, never a read the data cannot satisfy, no
protocol-5 buffer. The structure must be one a plain ``torch.save`` writes: an ``OrderedDict`` is
built empty (its items come after), its only attribute is a state dict's ``_metadata``; no other
container takes attributes; no key is set twice in one dict. Every tensor and storage, and every other
``torch`` name (dtypes, layouts, devices: sparse and meta tensors refer to them), is a stand-in that
holds nothing and runs nothing.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict
from typing import Any

MAX_OPS = 1_000_000
"""Opcodes in one training state: torch.save writes ~31 a tensor (4000 tensors: 126k opcodes, 0.25 s),
and a drafter's state (weights and an Adam optimizer) holds a few hundred tensors; an opcode
allocates at most ~300 bytes (a set and its memo entry)."""
MAX_STACK = 100_000
"""Items on the unpickler's stack: torch.save sets a dict's items in batches of 1000."""
_PROTOCOL_5 = (pickle.BYTEARRAY8, pickle.NEXT_BUFFER, pickle.READONLY_BUFFER)


class _Stub:
    """Stands in for a tensor, a storage or any other torch object: never holds data, never runs code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _Dict(dict[Any, Any]):
    """A pickled dict: no attributes (BUILD fails), and no key set twice."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in self:
            raise pickle.UnpicklingError(
                f"key {key!r:.60} is set twice in one dict, which a pickled dict never does"
            )
        super().__setitem__(key, value)


class _OrderedDict(OrderedDict[Any, Any]):
    """``collections.OrderedDict`` as torch.save writes it: built empty, ``_metadata`` its only attribute."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in self:
            raise pickle.UnpicklingError(f"key {key!r:.60} is set twice in one OrderedDict")
        super().__setitem__(key, value)

    def __setstate__(self, state: Any) -> None:
        # a module's state_dict() carries its _metadata (version numbers); nothing else is an attribute
        if type(state) is not _Dict or set(state) - {"_metadata"}:
            raise pickle.UnpicklingError(
                "an OrderedDict given attributes other than a state dict's _metadata: "
                "a structure torch.save never writes"
            )


def _new_ordered_dict(*args: Any) -> _OrderedDict:
    if args:  # torch.save writes OrderedDict() and sets the items after
        raise pickle.UnpicklingError("an OrderedDict built from arguments, which torch.save never writes")
    return _OrderedDict()


_CONTAINERS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): _new_ordered_dict,
    ("torch", "Size"): tuple,  # only ever a tuple of ints
    # torch.save pickles with protocol 2, which names the builtins module "__builtin__"
    **{(module, "set"): set for module in ("builtins", "__builtin__")},
    **{(module, "frozenset"): frozenset for module in ("builtins", "__builtin__")},
}


class _Exact(io.BytesIO):
    """The pickle's bytes; a read of more than remain is refused instead of silently cut short."""

    def read(self, n: int | None = -1) -> bytes:
        data = super().read(n)
        if n is not None and n >= 0 and len(data) < n:
            raise pickle.UnpicklingError(f"an opcode claims {n} bytes where {len(data)} remain")
        return data


def _counted(step: Any) -> Any:
    def counted(self: StateUnpickler) -> None:
        self.ops += 1
        if self.ops > MAX_OPS:
            raise pickle.UnpicklingError(f"more than {MAX_OPS} opcodes, more than a training state holds")
        step(self)
        if len(self.stack) + self.below > MAX_STACK:
            raise pickle.UnpicklingError(
                f"more than {MAX_STACK} items on the stack (containers nested or unclosed that deep)"
            )

    return counted


def _refused(self: StateUnpickler) -> None:
    raise pickle.UnpicklingError("a protocol-5 out-of-band buffer, which torch.save never writes")


_PurePythonUnpickler: Any = pickle._Unpickler  # its stack, marks and dispatch table are not in the stubs


class StateUnpickler(_PurePythonUnpickler):
    """Unpickles ``data`` (a torch checkpoint's ``data.pkl``) within the budgets above."""

    dispatch: dict[int, Any] = dict(_PurePythonUnpickler.dispatch)

    def __init__(self, data: bytes) -> None:
        super().__init__(_Exact(data))
        self.ops = 0
        self.below = 0  # items (and marks) the stacks under the open marks hold

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CONTAINERS:
            return _CONTAINERS[module, name]
        if module == "torch" or module.startswith("torch."):
            return _Stub  # _rebuild_* functions, storages, dtypes, layouts, devices: never called
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: Any) -> _Stub:
        return _Stub()

    def load_mark(self) -> None:
        self.below += len(self.stack) + 1
        super().load_mark()

    def pop_mark(self) -> list[Any]:
        items = super().pop_mark()
        self.below -= len(self.stack) + 1
        return items

    def load_empty_dictionary(self) -> None:
        self.append(_Dict())

    def load_dict(self) -> None:
        items = self.pop_mark()
        d = _Dict()
        for i in range(0, len(items), 2):
            d[items[i]] = items[i + 1]
        self.append(d)


StateUnpickler.dispatch.update(
    {
        pickle.MARK[0]: StateUnpickler.load_mark,
        pickle.EMPTY_DICT[0]: StateUnpickler.load_empty_dictionary,
        pickle.DICT[0]: StateUnpickler.load_dict,
        **{op[0]: _refused for op in _PROTOCOL_5},
    }
)
StateUnpickler.dispatch = {code: _counted(step) for code, step in StateUnpickler.dispatch.items()}

DICT_TYPES = (_Dict, _OrderedDict)
"""The types a training state's top-level dict unpickles to."""

__all__ = ["MAX_OPS", "MAX_STACK", "DICT_TYPES", "StateUnpickler"]
