"""The identifiers generated CUDA C uses, and the checks that keep a custom op's names and
expression from colliding with them or breaking the source.

:mod:`oxiwork.ops.codegen` (and the kernels in :mod:`oxiwork.ops.table`) name pointer
arguments ``in<k>``/``out<k>``, step values ``t<j>``, broadcast index sizes ``m<k>...``, fused
parameters ``s<j>_<name>``, loop indices and sizes ``i``, ``n``, ``row``, ``cols``...;
:func:`oxiwork.ops.custom` refuses, when the op is defined, a parameter name, function name
or expression that would shadow one of them, use a C keyword, or make the generated source
invalid, and sources and expressions of unbounded size.

Example
-------
>>> check_param_name("alpha", "custom op 'k'")
'alpha'
>>> try:
...     check_param_name("n", "custom op 'k'")
... except InvalidArgument as e:
...     print(e)
custom op 'k': parameter name 'n' is used by the generated CUDA C (sizes, indices, arguments); pick another name
"""

from __future__ import annotations

import re
import string
from collections.abc import Collection

from oxiwork.error import InvalidArgument

__all__ = [
    "C_KEYWORDS",
    "GENERATED",
    "MAX_ARITY",
    "MAX_EXPR",
    "MAX_SOURCE_BYTES",
    "check_expr",
    "check_function_name",
    "check_param_name",
    "check_source",
]

#: Longest element-wise expression template, in characters.
MAX_EXPR = 1024
#: Largest custom CUDA source, in bytes of UTF-8.
MAX_SOURCE_BYTES = 1 << 20
#: Most inputs of a custom op.
MAX_ARITY = 64
#: Longest op, function or parameter name.
MAX_IDENT = 64

#: C and C++ keywords and the CUDA built-ins a kernel body can see.
C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while bool true false class namespace template
    typename this new delete operator private public protected virtual friend using throw try
    catch explicit mutable asm constexpr decltype nullptr static_assert thread_local alignas
    alignof noexcept size_t threadIdx blockIdx blockDim gridDim warpSize""".split()  # noqa: SIM905
)
#: Fixed identifiers of the generated kernels: loop indices, sizes, accumulators, helpers.
GENERATED = frozenset(
    """i j k m n o q r c s v d row col rows cols total acc mx sm mean var den red is_max xg
    ox_block_reduce OXIWORK_BLOCK_REDUCE""".split()  # noqa: SIM905
)
# Numbered identifiers: pointer arguments, step values, moduli, loop counters, fused params.
_NUMBERED = re.compile(r"(in|out|t|m|q|xs)\d+|m\d+[a-z]\w*|s\d+_.*|r[kc]\d+[dms]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Numeric literals (2, 0.5f, 1e-3f, 0x1F, 10u), removed before looking for identifiers.
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_])(0[xX][0-9a-fA-F]+|\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[fFuUlL]*"
)
# Characters an expression may hold: operators, parentheses, brackets, '.', ',', '?', ':'.
_EXPR_CHARS = frozenset(string.ascii_letters + string.digits + "_ +-*/%()[].,?:<>=!&|^~")
# Statement and declaration keywords have no place inside an expression; the others
# (casts such as (float), true/false) are harmless.
_NOT_IN_EXPR = C_KEYWORDS - {"float", "double", "int", "unsigned", "long", "short", "char",
                             "bool", "true", "false", "signed", "size_t", "const", "sizeof"}  # fmt: skip


def _ident(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_IDENT or not _IDENT.fullmatch(value):
        shown = repr(value)[:60]
        raise InvalidArgument(
            f"{where}: {what} {shown} must be a C identifier (ASCII letters, digits and _, "
            f"not starting with a digit) of at most {MAX_IDENT} characters"
        )
    if value in C_KEYWORDS:
        raise InvalidArgument(f"{where}: {what} {value!r} is a C/CUDA keyword; pick another name")
    if value.startswith("_"):
        raise InvalidArgument(
            f"{where}: {what} {value!r} starts with '_', which C reserves; pick another name"
        )
    return value


def check_param_name(value: object, where: str) -> str:
    """A custom op's parameter name: a C identifier that no generated name can shadow."""
    name = _ident(value, "parameter name", where)
    if name in GENERATED or _NUMBERED.fullmatch(name) or name.startswith(("ox_", "oxiwork")):
        raise InvalidArgument(
            f"{where}: parameter name {name!r} is used by the generated CUDA C (sizes, "
            "indices, arguments); pick another name"
        )
    return name


def check_function_name(value: object, where: str) -> str:
    """The ``extern "C"`` function of a custom kernel (or an op name): a C identifier."""
    return _ident(value, "function name", where)


def check_source(value: object, where: str) -> str:
    """A custom kernel's CUDA source: UTF-8 text of at most :data:`MAX_SOURCE_BYTES`."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: source must be a str, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{where}: the source is not valid Unicode (lone surrogates)"
        ) from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidArgument(
            f"{where}: the source is {size} bytes; at most {MAX_SOURCE_BYTES} are allowed"
        )
    if "\x00" in value:
        raise InvalidArgument(f"{where}: the source contains a NUL character")
    return value


def check_expr(value: object, arity: int, params: Collection[str], where: str) -> str:
    """An element-wise expression template: ``{0}``.. ``{arity-1}`` are the inputs and
    ``{name}`` the parameters; the rest is one C expression over them.

    Refused: format conversions and specs (``{0!r}``, ``{0:>4}``), attribute or index
    fields, unknown fields, characters that end or escape an expression (``;``, braces,
    quotes, ``#``, comments), unbalanced parentheses, keywords, and identifiers the generated
    code defines (``n``, ``i``, ``in0``...), which the expression would silently read.

    >>> check_expr("fmaxf({0}, {alpha})", 1, ["alpha"], "custom op 'k'")
    'fmaxf({0}, {alpha})'
    >>> try:
    ...     check_expr("({0} + n)", 1, [], "custom op 'k'")
    ... except InvalidArgument as e:
    ...     print(e)
    custom op 'k': expr uses 'n', which the generated CUDA C defines (sizes, indices, arguments); pass it as {0} or a parameter
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: expr must be a str, got {type(value).__name__}")
    if not 0 < len(value) <= MAX_EXPR:
        raise InvalidArgument(f"{where}: expr has {len(value)} characters; give 1 to {MAX_EXPR}")
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as e:
        raise InvalidArgument(
            f"{where}: expr is not a valid template ({e}); write {{{{ and }}}} for braces"
        ) from None
    literal = []
    for text, field, spec, conversion in parts:
        literal.append(text)
        if field is None:
            continue
        if conversion is not None or spec:
            raise InvalidArgument(
                f"{where}: expr field {{{field}}} has a conversion or format spec; write "
                "plain {0} or {name}"
            )
        if field.isdigit() and field.isascii():
            if int(field) >= arity:
                raise InvalidArgument(
                    f"{where}: expr uses {{{field}}} but the op has only {arity} input(s)"
                )
        elif field not in params:
            raise InvalidArgument(
                f"{where}: expr uses {{{field[:40]}}}, which is neither an input index nor a "
                f"parameter ({', '.join(sorted(params)) or 'none'})"
            )
        literal.append(" (x) ")  # what a field becomes: one operand
    text = "".join(literal)
    bad = sorted(set(text) - _EXPR_CHARS)
    if bad:
        raise InvalidArgument(
            f"{where}: expr contains {''.join(bad)[:20]!r}, which cannot appear in one C "
            "expression (no statements, braces, quotes, comments or preprocessor lines)"
        )
    if "//" in text or "/*" in text or "*/" in text:
        raise InvalidArgument(f"{where}: expr contains a comment")
    if not _balanced(text):
        raise InvalidArgument(f"{where}: expr has unbalanced parentheses or brackets")
    for ident in _IDENT.findall(_NUMBER.sub(" 0 ", text)):
        if ident == "x":
            continue  # a field's placeholder
        if ident in _NOT_IN_EXPR:
            raise InvalidArgument(f"{where}: expr uses the keyword {ident!r}")
        if ident in GENERATED or _NUMBERED.fullmatch(ident) or ident.startswith("ox_"):
            raise InvalidArgument(
                f"{where}: expr uses {ident!r}, which the generated CUDA C defines (sizes, "
                "indices, arguments); pass it as {0} or a parameter"
            )
    return value


def _balanced(text: str) -> bool:
    stack: list[str] = []
    pairs = {")": "(", "]": "["}
    for ch in text:
        if ch in "([":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack
