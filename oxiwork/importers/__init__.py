"""Importers: real models in as :class:`~oxiwork.graph.ComputeGraph` values.

- :mod:`oxiwork.importers.torch`: a PyTorch module through ``torch.export`` (core ATen),
  every op a kernel that the simulator can compute. It needs the ``[torch]`` extra
  (``pip install "oxiwork[torch]"``); torch is imported only when that module is used, so
  ``import oxiwork`` and ``import oxiwork.importers`` never import it.

>>> import oxiwork.importers
>>> oxiwork.importers.AVAILABLE
('torch',)
"""

AVAILABLE = ("torch",)
"""The importer modules of this package, by name (``oxiwork.importers.<name>``)."""
