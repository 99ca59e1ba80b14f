"""Notebooks saved as HTML that show the workbench offline: an nbconvert exporter.

nbconvert's own HTML page draws saved widgets with ``@jupyter-widgets/html-manager`` fetched
from a CDN, which then fetches anywidget's frontend from another: opened offline, a saved
workbench notebook shows nothing. :class:`OfflineHTMLExporter` writes JupyterLab's page
with nothing fetched from a network: oxiwork's offline host (``oxiwork/static/embed.js``,
built from ``widget_js/src/embed.ts``) is inlined, and it draws each saved anywidget (the
:class:`~oxiwork.widget.Workbench`) from the ES module and CSS that the saved widget state
already holds, with the binary traits (the DAG's columns) from the state too. RequireJS,
MathJax and Mermaid, which the lab page loads from CDNs, are left out (a saved page shows
formulas as their TeX source).

Run it, executing the notebook so that the widget state holds the full pipeline's views::

    jupyter nbconvert --to oxiwork --execute notebooks/workbench.ipynb

(the ``oxiwork`` exporter is registered by the package's ``nbconvert.exporters`` entry point;
``--to oxiwork.export.notebook.OfflineHTMLExporter`` names the same class without it). A
saved page has no kernel: pan, zoom, search, the pass slider's views and every tab drawn
from the saved state work; a request the widget would send to Python (select a node, step
the simulator) is answered with a note saying so.

Example
-------
>>> import nbformat
>>> html, _ = OfflineHTMLExporter().from_notebook_node(nbformat.v4.new_notebook())
>>> "cdn" in html.lower(), "require.js" in html
(False, False)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import markupsafe
from nbconvert.exporters import HTMLExporter
from traitlets import default

__all__ = ["EMBED_JS", "OfflineHTMLExporter"]

_HERE = Path(__file__).resolve().parent
#: The offline host the page inlines (widget_js/build.mjs writes it).
EMBED_JS = _HERE.parent / "static" / "embed.js"
_TEMPLATES = _HERE / "templates"
_CLOSE = re.compile("</script", re.IGNORECASE)


class OfflineHTMLExporter(HTMLExporter):
    """JupyterLab's HTML export with saved anywidgets drawn offline (see the module)."""

    export_from_notebook = "HTML (oxiwork, offline widgets)"

    @default("template_name")
    def _template_name_default(self) -> str:
        return "oxiwork_offline"

    @default("extra_template_basedirs")
    def _default_extra_template_basedirs(self) -> list[str]:
        return [str(_TEMPLATES), *super()._default_extra_template_basedirs()]

    def _init_resources(self, resources: Any) -> Any:
        resources = super()._init_resources(resources)
        resources["oxiwork_embed_js"] = markupsafe.Markup(_inline_script(_embed_source()))
        return resources


def _embed_source() -> str:
    try:
        return EMBED_JS.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{EMBED_JS} is missing: build the widget bundle first "
            "(cd widget_js && npm ci && node build.mjs); a pip install builds it"
        ) from None


def _inline_script(js: str) -> str:
    """``js`` safe inside an inline ``<script>``: nothing in it can close the element.

    ``</script`` and ``<!--`` only occur inside string or regex literals of a script, where
    ``<\\/`` and ``<\\!`` mean the same characters (the escape nbconvert's
    ``escape_html_script`` filter applies to the saved state).

    >>> _inline_script('s = "</script><!--"')
    's = "<\\\\/script><\\\\!--"'
    """
    return _CLOSE.sub("<\\\\/script", js).replace("<!--", "<\\!--")
