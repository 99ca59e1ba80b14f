"""Ops: the op table, kernel programs and CUDA code generation.

>>> from oxiwork import ops
>>> ops.get("gelu").fusion_class
<FusionClass.ELEMENTWISE: 'elementwise'>
"""

# Op libraries beyond the built-ins register their entries on import.
from oxiwork.ops import (
    lib_conv,  # noqa: F401  (registers conv2d, pooling, pad, cat)
    lib_dtype,  # noqa: F401  (registers cast_<dtype>, embedding)
    lib_elementwise,  # noqa: F401  (batch norm, activations, scalar ops, where...)
    lib_reduce,  # noqa: F401  (registers the matmul variants, reductions)
)
from oxiwork.ops.codegen import KernelSource, function_name, kernel_source
from oxiwork.ops.program import BoundProgram, BoundStep, bind, describe, program_of, run
from oxiwork.ops.table import (
    BUILTIN_OPS,
    REGISTRY,
    FusionClass,
    OpDef,
    Shape,
    bind_params,
    broadcast_shape,
    broadcast_terms,
    custom,
    get,
    infer_dtype,
    infer_shape,
    register,
)

__all__ = [
    "BUILTIN_OPS",
    "REGISTRY",
    "BoundProgram",
    "BoundStep",
    "FusionClass",
    "KernelSource",
    "OpDef",
    "Shape",
    "bind",
    "bind_params",
    "broadcast_shape",
    "broadcast_terms",
    "custom",
    "describe",
    "function_name",
    "get",
    "infer_dtype",
    "infer_shape",
    "kernel_source",
    "program_of",
    "register",
    "run",
]
