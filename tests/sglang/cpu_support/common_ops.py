"""Stand-in for sgl_kernel's compiled ``common_ops`` library, for the CPU served tests only.

The ``sglang-kernel`` wheel ships CUDA builds only; its loader's last fallback is a plain
``import common_ops``. This empty module lets the real ``sgl_kernel`` Python package import on a
machine without CUDA: its ops are looked up in ``torch.ops.sgl_kernel`` only when called, and the
few the DFlash-family rounds call on CPU are defined by ``dspark_cpu_patches``.
"""
