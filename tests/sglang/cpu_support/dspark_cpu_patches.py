"""Test-side patches that let sglang's real engine run DFlash-family speculative rounds on a CPU.

Nothing here edits sglang, and nothing here ships in the package: the served tests put this folder on
``PYTHONPATH`` (with ``DSPARK_CPU_PATCHES=1``) so that ``sitecustomize`` calls ``install()`` in the test
driver and in every scheduler process sglang spawns. Each patch is applied when its sglang module is
imported (a post-import hook) or at once if it already is, checks that the layout it expects is there,
and fails loudly otherwise, naming the sglang version.

What each patch does and why (all are CPU-only gaps, none changes what a round computes):

1. ``sgl_kernel`` ops the speculative path calls on CPU but the CUDA-only wheel does not ship (index
   bookkeeping only), defined with ``torch.library`` in namespace ``sgl_kernel`` with the semantics of
   sglang's triton kernels of the same name.
2. The builtin DFLASH/DSPARK argument handlers refuse ``--device cpu`` by a device-string check; while
   they run, the device check sees ``cuda`` (everything else they read is unchanged).
3. ``torch_native`` is added to the draft attention backends sglang accepts (it would silently fall
   back to flashinfer, which cannot run here).
4. ``Tensor.record_stream`` is a no-op for CPU tensors (there are no streams to record on).
5. ``ModelRunner._extend_forward_kwargs`` casts ``input_embeds`` to bfloat16 unconditionally; cast to
   the runner's dtype instead (the served tests run float32).
6. ``TorchNativeAttnBackend`` has no TARGET_VERIFY path (the target's verify and the drafter's block
   forward are such batches); it is served as an extend of n tokens on top of ``seq_lens`` committed
   tokens, which is exact for a chain (causal for the target, bidirectional for the encoder-only
   drafter). Tree masks are refused.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_PATCHES: dict[str, list[Callable[[Any], None]]] = {}
_DONE: set[str] = set()
_INSTALLED = False


class CpuPatchError(RuntimeError):
    """The installed sglang does not have the layout a CPU patch expects."""


def _sglang_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001 - only used in a message
        return "unknown"


def _require(module: Any, name: str) -> Any:
    if not hasattr(module, name):
        raise CpuPatchError(
            f"CPU test patches: {module.__name__}.{name} is missing in sglang {_sglang_version()}; "
            "the served-test patches (tests/sglang/cpu_support/dspark_cpu_patches.py) need an update "
            "for this sglang layout."
        )
    return getattr(module, name)


def patch(module_name: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register ``fn(module)`` to run once ``module_name`` is imported (at once if it was already
    patched: a patch registered after ``install()``, as ``dspark_bench_timing``'s)."""

    def deco(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        _PATCHES.setdefault(module_name, []).append(fn)
        if module_name in _DONE:
            fn(sys.modules[module_name])
        return fn

    return deco


# ---------------------------------------------------------------- 1. sgl_kernel CPU ops
# The CPU bodies of the ops (each mirrors the triton kernel it names).
def _op_segments(start: Any, end: Any) -> list[tuple[int, int, int]]:
    out, offset = [], 0
    for s, e in zip(start.tolist(), end.tolist(), strict=True):
        out.append((offset, int(s), int(e)))
        offset += int(e) - int(s)
    return out


ROW_OVERRUNS_ENV = "DSPARK_ROW_OVERRUNS"
"""Where a write or read past a request's ``req_to_token`` row is recorded instead of raised (a file, one
line each): the builtins' overruns at the context edge, counted as the contrast. Unset: every overrun
raises ``RowOverrunError`` and stops the scheduler, in every served test."""


class RowOverrunError(RuntimeError):
    """A kernel stand-in addressed slots past a request's row of ``req_to_token``: on a GPU, sglang's
    Triton kernel bounds the access by ``kv_end`` only, so it would touch the NEXT request's row."""


def _row_bounds(op, row, s, e, width):
    """Refuse (or, under ``DSPARK_ROW_OVERRUNS``, record) an access to slots ``s:e`` of a row of ``width``."""
    import os

    if e <= width:
        return e
    what = f"{op}: row {row}, slots {s}..{e} past its {width} (by {e - width})"
    log = os.environ.get(ROW_OVERRUNS_ENV)
    if not log:
        raise RowOverrunError(f"{what}: on a GPU this lands in another request's row (sglang issue 33579)")
    with open(log, "a", encoding="utf-8") as f:
        f.write(what + "\n")
    return width  # the stand-in then does what the CPU tensor allows: the slots within the row


def _op_assign_req_to_token_pool(rpi, req_to_token, start, end, out_cache_loc, pool_len):
    # triton assign_req_to_token_pool: req_to_token[rpi[i], start:end] = out_cache_loc[packed]
    width = req_to_token.shape[1]
    for i, (off, s, e) in enumerate(_op_segments(start, end)):
        e = _row_bounds("assign_req_to_token_pool", int(rpi[i]), s, e, width)
        req_to_token[int(rpi[i]), s:e] = out_cache_loc[off : off + e - s].to(req_to_token.dtype)


def _op_assign_extend_cache_locs(rpi, req_to_token, start, end, out_cache_loc, pool_len):
    # triton assign_extend_cache_locs: out_cache_loc[packed] = req_to_token[rpi[i], start:end]
    width = req_to_token.shape[1]
    for i, (off, s, e) in enumerate(_op_segments(start, end)):
        e = _row_bounds("assign_extend_cache_locs", int(rpi[i]), s, e, width)
        out_cache_loc[off : off + e - s] = req_to_token[int(rpi[i]), s:e].to(out_cache_loc.dtype)


def _op_assign_draft_cache_locs_contiguous(rpi, req_to_token, seq_lens, out_cache_loc, pool_len, topk, steps):
    # triton assign_draft_cache_locs_contiguous: topk*steps slots from seq_lens[i] on, per request
    n, width = int(topk) * int(steps), req_to_token.shape[1]
    for i, s in enumerate(seq_lens.tolist()):
        e = _row_bounds("assign_draft_cache_locs_contiguous", int(rpi[i]), int(s), int(s) + n, width)
        row = req_to_token[int(rpi[i]), int(s) : e]
        out_cache_loc[i * n : i * n + e - int(s)] = row.to(out_cache_loc.dtype)


def _op_fill_bonus_tokens(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    # triton fill_bonus_tokens: the last accepted slot of each request (accept_lens counts the bonus)
    import torch

    flat = accept_tokens.reshape(-1)
    idx = torch.arange(accept_lens.numel()) * int(accept_stride) + accept_lens.reshape(-1).long() - 1
    bonus_tokens.copy_(flat[idx].to(bonus_tokens.dtype).reshape(bonus_tokens.shape))


def _op_fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc):
    # triton fill_accept_out_cache_loc: pack out_cache_loc[accept_index] for accept_index != -1
    idx = accept_index.reshape(-1)
    kept = idx[idx != -1].long()
    accept_out_cache_loc[: kept.numel()] = out_cache_loc[kept].to(accept_out_cache_loc.dtype)


def _op_copy_all_layer_kv_cache(data_ptrs, strides, tgt_loc, src_loc):
    # triton copy_all_layer_kv_cache_tiled: per layer buffer, rows src_loc -> rows tgt_loc
    # (gathered first, so an in-place overlap is safe). Buffers are given as raw pointers.
    import torch

    if tgt_loc.numel() == 0:
        return
    rows = int(max(int(tgt_loc.max()), int(src_loc.max()))) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(ptr))
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        buf[tgt_loc.long()] = buf[src_loc.long()].clone()


def _define_ops() -> None:
    import torch

    if hasattr(torch.ops.sgl_kernel, "fill_bonus_tokens_cpu"):
        return
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")  # noqa: TOR901 - kept alive below
    _define_ops.lib = lib  # type: ignore[attr-defined]

    def define(schema: str, fn: Callable[..., None]) -> None:
        name = schema.split("(", 1)[0]
        lib.define(schema)
        lib.impl(name, fn, "CPU")

    define(
        "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()",
        _op_assign_req_to_token_pool,
    )
    define(
        "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()",
        _op_assign_extend_cache_locs,
    )
    define(
        "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, "
        "Tensor seq_lens, Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()",
        _op_assign_draft_cache_locs_contiguous,
    )
    define(
        "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, "
        "int accept_stride) -> ()",
        _op_fill_bonus_tokens,
    )
    define(
        "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, "
        "Tensor(a!) accept_out_cache_loc) -> ()",
        _op_fill_accept_out_cache_loc,
    )
    define(
        "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        _op_copy_all_layer_kv_cache,
    )


# ---------------------------------------------------------------- 2. builtin handlers on --device cpu
class _DeviceView:
    """A resolving view whose ``device`` reads ``cuda``: only the handlers' device check sees it."""

    def __init__(self, view: Any) -> None:
        object.__setattr__(self, "_view", view)

    def __getattr__(self, name: str) -> Any:
        if name == "device":
            return "cuda"
        return getattr(object.__getattribute__(self, "_view"), name)


@patch("sglang.srt.arg_groups.speculative_hook")
def _handlers(mod: Any) -> None:
    for name in ("_handle_dflash", "_handle_dspark"):
        original = _require(mod, name)

        def wrapped(server_args: Any, _original: Any = original) -> None:
            if hasattr(mod, "resolving_view"):  # 0.5.23: handlers read the resolving view
                real_view = mod.resolving_view
                if str(real_view(server_args).device) != "cpu":
                    return _original(server_args)
                mod.resolving_view = lambda args: _DeviceView(real_view(args))
                try:
                    return _original(server_args)
                finally:
                    mod.resolving_view = real_view
            if server_args.device != "cpu":  # 0.5.17: handlers read the field
                return _original(server_args)
            object.__setattr__(server_args, "device", "cuda")
            try:
                return _original(server_args)
            finally:
                object.__setattr__(server_args, "device", "cpu")

        setattr(mod, name, wrapped)
    if not hasattr(mod, "resolving_view"):
        # 0.5.17 keeps a function-local allow-list of draft backends: keep torch_native as given.
        resolve = _require(mod, "_resolve_dflash_draft_attention_backend")

        def resolve_backend(server_args: Any, _resolve: Any = resolve) -> None:
            if server_args.speculative_draft_attention_backend == "torch_native":
                return None
            return _resolve(server_args)

        mod._resolve_dflash_draft_attention_backend = resolve_backend


# ---------------------------------------------------------------- 3. torch_native draft backend
@patch("sglang.srt.arg_groups.choices")
def _choices(mod: Any) -> None:
    choices = _require(mod, "DRAFT_ATTENTION_BACKEND_CHOICES")
    if "torch_native" not in choices:
        choices.append("torch_native")


@patch("sglang.srt.speculative.draft_worker_common")
def _draft_backends(mod: Any) -> None:
    if hasattr(mod, "_SUPPORTED_DRAFT_BACKENDS"):  # 0.5.17
        if "torch_native" not in mod._SUPPORTED_DRAFT_BACKENDS:
            mod._SUPPORTED_DRAFT_BACKENDS = (*mod._SUPPORTED_DRAFT_BACKENDS, "torch_native")


# ---------------------------------------------------------------- 5. input_embeds dtype
@patch("sglang.srt.model_executor.model_runner")
def _model_runner(mod: Any) -> None:
    runner = _require(mod, "ModelRunner")
    original = _require(runner, "_extend_forward_kwargs")

    def _extend_forward_kwargs(self: Any, forward_batch: Any, pp_proxy_tensors: Any) -> dict:
        kwargs = original(self, forward_batch, pp_proxy_tensors)
        embeds = forward_batch.input_embeds
        if embeds is not None and getattr(forward_batch, "replace_embeds", None) is None:
            kwargs["input_embeds"] = embeds.to(self.dtype)
        return kwargs

    runner._extend_forward_kwargs = _extend_forward_kwargs


# ---------------------------------------------------------------- 6. TARGET_VERIFY on torch_native
class _VerifyAsExtend:
    """A forward batch seen as an extend of ``n`` tokens per request on top of ``seq_lens``."""

    def __init__(self, batch: Any, n: int) -> None:
        import torch

        self._batch = batch
        prefix = batch.seq_lens
        self.extend_prefix_lens = prefix
        self.extend_seq_lens = torch.full_like(prefix, n)
        self.seq_lens = prefix + n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)


@patch("sglang.srt.layers.attention.torch_native_backend")
def _torch_native(mod: Any) -> None:
    backend = _require(mod, "TorchNativeAttnBackend")
    original = _require(backend, "forward_extend")

    def forward_extend(self: Any, q, k, v, layer, forward_batch, save_kv_cache=True):
        mode = forward_batch.forward_mode
        if not mode.is_target_verify() or forward_batch.extend_prefix_lens is not None:
            return original(self, q, k, v, layer, forward_batch, save_kv_cache)
        spec = getattr(forward_batch, "spec_info", None)
        if getattr(spec, "custom_mask", None) is not None:
            raise CpuPatchError("CPU test patches: tree (custom-mask) verify is not supported")
        bs = int(forward_batch.seq_lens.shape[0])
        tokens = int(q.shape[0])
        if tokens % bs:
            raise CpuPatchError(f"CPU test patches: {tokens} verify tokens for {bs} requests (ragged)")
        return original(self, q, k, v, layer, _VerifyAsExtend(forward_batch, tokens // bs), save_kv_cache)

    backend.forward_extend = forward_extend


# ---------------------------------------------------------------- the post-import hook
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _PATCHES or fullname in _DONE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            _apply(fullname, module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _apply(name: str, module: Any) -> None:
    if name in _DONE:
        return
    _DONE.add(name)
    for fn in _PATCHES[name]:
        fn(module)


def install() -> None:
    """Apply every patch now (already-imported modules) or on import; idempotent."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    import torch

    _define_ops()
    record_stream = torch.Tensor.record_stream

    def record_stream_cpu_noop(self: Any, stream: Any) -> None:
        if self.device.type == "cpu":
            return None
        return record_stream(self, stream)

    torch.Tensor.record_stream = record_stream_cpu_noop  # type: ignore[method-assign]
    sys.meta_path.insert(0, _Finder())
    for name in list(_PATCHES):
        if name in sys.modules:
            _apply(name, sys.modules[name])


def applied() -> list[str]:
    """The sglang modules patched so far in this process."""
    return sorted(_DONE)
