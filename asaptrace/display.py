"""How a result shows itself in a notebook, without the result knowing any face.

The result types (``Diagnosis``, ``ReplayResult``, ``SweepResult``, ``Advice``) live in low
layers that may not import the views; they inherit :class:`HtmlRepr`, whose ``_repr_html_`` asks
this registry for a renderer by class name. :mod:`asaptrace.notebook` (a face, above the views)
registers the renderers; ``import asaptrace`` imports it when IPython is running, so in Jupyter
every result draws the same tables as the CLI and the report, escaped the same way. Elsewhere
``_repr_html_`` returns None and the one-line ``__repr__`` is what shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_RENDERERS: dict[str, Callable[[Any], str]] = {}


def register_html(class_name: str, render: Callable[[Any], str]) -> None:
    """Show objects of ``class_name`` in a notebook as ``render(obj)`` (HTML, already escaped)."""
    _RENDERERS[class_name] = render


class HtmlRepr:
    """Mixin: ``_repr_html_`` from the registered renderer (None when no face registered one)."""

    def _repr_html_(self) -> str | None:
        render = _RENDERERS.get(type(self).__name__)
        return None if render is None else render(self)
