"""The TypeScript side of the widget boundary mirrors the Python side.

``widget_js/src/messages.ts`` declares the synced model (one field per synced trait of
:class:`~oxiwork.widget.workbench.Workbench`) and the ``Request`` union (one member per entry
of :data:`oxiwork.widget.messages.SCHEMAS`, with the same fields, optional where the schema's
field is not required). A message added on one side only fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oxiwork.widget.messages import SCHEMAS
from oxiwork.widget.workbench import Workbench

TS = Path(__file__).resolve().parents[2] / "widget_js" / "src" / "messages.ts"


def _block(text: str, start: str) -> str:
    i = text.index(start)
    return text[i : text.index("\n\n", i)]


def _requests() -> dict[str, dict[str, bool]]:
    """Request union members: type -> {field: required}."""
    union = _block(TS.read_text(), "export type Request =")
    out: dict[str, dict[str, bool]] = {}
    for member in re.findall(r"\|\s*\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", union):
        fields = [f.strip() for f in re.split(r";(?![^{]*\})", member) if f.strip()]
        kind = re.fullmatch(r'type:\s*"(\w+)"', fields[0])
        assert kind, f"a Request member must start with its type: {member!r}"
        out[kind.group(1)] = {
            m.group(1): m.group(2) != "?" for f in fields[1:] if (m := re.match(r"(\w+)(\??):", f))
        }
    return out


class TestRequestUnion:
    def test_lists_every_message_type(self) -> None:
        assert sorted(_requests()) == sorted(SCHEMAS)

    @pytest.mark.parametrize("mtype", sorted(SCHEMAS))
    def test_fields_and_optionality_match(self, mtype: str) -> None:
        want = {name: f.required for name, f in SCHEMAS[mtype].items()}
        assert _requests()[mtype] == want


class TestModel:
    def test_one_field_per_synced_trait(self) -> None:
        model = _block(TS.read_text(), "export interface WorkbenchModel {")
        fields = set(re.findall(r"^\s+(\w+):", model, re.M))
        synced = {n for n in Workbench.class_own_traits(sync=True) if not n.startswith("_")}
        assert fields == synced
