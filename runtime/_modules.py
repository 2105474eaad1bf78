"""The importable name of a module: what a worker imports to find a definition.

A workflow's id names its module (``workflow//shop.pay//checkout``) and a worker
finds the code by importing that name, so a module must be named the way a
worker would import it, however this process loaded it:

* run with ``python -m shop.pay``: ``__spec__.name`` (``shop.pay``);
* run as a script (``python shop/pay.py``), or loaded from a path: the file's
  dotted name below an import root.  The file's package is found by walking up
  the folders holding an ``__init__.py``; an import root is the current
  directory (a worker started here puts it first on ``sys.path``) or a
  ``sys.path`` entry, except the folder of the running script itself (Python
  puts it first for the script alone; a worker does not have it).  The deepest
  root that holds the file wins (``src/`` on ``sys.path`` beats the current
  directory above it).  A loose script (in no package) below no other root is
  named by its stem, as a worker started in its folder would import it.

Otherwise there is no importable name (``None``): a module of a package run as
a script from outside the project, a file below no import root.
"""

from __future__ import annotations

import functools
import keyword
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["importable_name", "module_name_of"]


def module_name_of(namespace: dict[str, Any]) -> str | None:
    """The importable name of the module whose globals are ``namespace``.

    ``__name__`` unless it is ``__main__``: then the name ``python -m`` was
    given, or the script file's dotted name (see the module docstring); ``None``
    when there is none (an interactive session, a file outside every import root).
    """
    name = namespace.get("__name__")
    if name != "__main__":
        return str(name) if name else None
    spec = namespace.get("__spec__")
    spec_name = getattr(spec, "name", None)
    if spec_name and spec_name != "__main__":
        return str(spec_name)
    file = namespace.get("__file__")
    if not file:
        return None
    return importable_name(Path(str(file)), script=True)


def importable_name(path: Path, *, script: bool = False) -> str | None:
    """The dotted name ``import`` finds the file ``path`` under, or ``None``.

    Args:
        path: a ``.py`` file (``__init__.py``: its package).
        script: the file is the running script: its own folder is not an import
            root (unless it is the current directory).
    """
    # Cached on what decides it: a nested step in a script re-asks at every call.
    return _importable_name(str(path), tuple(sys.path), os.getcwd(), script=script)


@functools.lru_cache(maxsize=256)
def _importable_name(file: str, search: tuple[str, ...], cwd: str, *, script: bool) -> str | None:
    path = Path(file).resolve()
    if path.suffix != ".py":
        return None
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    here = Path(cwd).resolve()
    roots = [here]
    own = False  # the script's own folder is on sys.path
    for entry in search:
        root = Path(entry or cwd).resolve()
        if script and root == path.parent and root != here:
            own = True  # on sys.path for this process only: the last resort (below)
            continue
        roots.append(root)
    best: str | None = None
    for root in roots:
        dotted = _dotted(folder, root, parts)
        if dotted is not None and (best is None or dotted.count(".") < best.count(".")):
            best = dotted
    if best is None and own and folder == path.parent:
        # A loose script (no package) below no other root: a worker started in
        # its folder imports it by its stem, as this process did.
        best = _dotted(folder, folder, parts)
    return best


def _dotted(folder: Path, root: Path, parts: list[str]) -> str | None:
    """The dotted name of ``parts`` in ``folder`` below ``root``, if ``import`` can spell it."""
    if not folder.is_relative_to(root):
        return None
    dotted = [*folder.relative_to(root).parts, *parts]
    if not dotted or not all(p.isidentifier() and not keyword.iskeyword(p) for p in dotted):
        return None
    return ".".join(dotted)
