"""The oxiwork workbench widget (anywidget) and its kernel-side view-model.

>>> from oxiwork.widget import Workbench
>>> Workbench.__name__
'Workbench'
"""

from oxiwork.widget.workbench import InvalidOption, NotAGraph, Workbench

__all__ = ["InvalidOption", "NotAGraph", "Workbench"]
