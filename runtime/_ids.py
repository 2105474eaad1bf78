"""Ids of workflows and steps: ``<prefix>//<module>//<name>``.

``<module>`` is the function's module (``shop.pay``) or a versioned specifier given
with ``module=`` (``payments@2``).  ``<name>`` comes from the qualified name:
``<locals>`` levels become ``/`` (``checkout/validate``), an instance method is
``Class#method`` and a static or class method ``Class.method``; ``name=`` replaces
it whole.  A step id is the stem of the World's correlation ids (the engine appends
``#<n>``), so ids keep to the World's alphabet and stay short enough for the suffix.
"""

from __future__ import annotations

import re
from typing import Literal

from ._authoring_errors import InvalidDefinition

__all__ = ["MAX_ID_LENGTH", "ParsedQualname", "make_id", "parse_qualname"]

#: The longest id accepted: the World allows 256 characters in a correlation id,
#: and the engine appends ``#<occurrence>``.
MAX_ID_LENGTH = 240

_ALPHABET = re.compile(r"[A-Za-z0-9_.:/#@+=~-]+")
_ALPHABET_TEXT = "[A-Za-z0-9_.:/#@+=~-]"

Prefix = Literal["workflow", "step"]


class ParsedQualname:
    """What a ``__qualname__`` says about where a function was written.

    Attributes:
        path: the name with ``<locals>`` levels as ``/`` (``checkout/validate``,
            ``Cart.total``).
        in_class: the function was written directly in a class body.
        nested: the function was written inside another function.
        class_path: for ``in_class``, the path of the class (``Cart``, ``f/Cart``).
        member: the function's own name.
    """

    __slots__ = ("class_path", "in_class", "member", "nested", "path")

    def __init__(self, qualname: str) -> None:
        parts = qualname.split(".")
        # "<locals>" separates a function from what it defines; anything else
        # before the last part is a class the function is written in.
        self.member = parts[-1]
        self.in_class = len(parts) > 1 and parts[-2] != "<locals>"
        self.nested = "<locals>" in parts and not self.in_class
        self.path = qualname.replace(".<locals>.", "/")
        self.class_path = self.path.rpartition(".")[0] if self.in_class else ""


def parse_qualname(qualname: str) -> ParsedQualname:
    """Parse a ``__qualname__`` (see :class:`ParsedQualname`)."""
    return ParsedQualname(qualname)


def make_id(prefix: Prefix, module: str, name: str, *, function: str) -> str:
    """Build and check ``<prefix>//<module>//<name>``.

    Args:
        prefix: ``workflow`` or ``step``.
        module: the module part (a module name or a versioned specifier).
        name: the name part.
        function: the function's qualified name, for error messages.

    Raises:
        InvalidDefinition: a part is empty, holds ``//`` or a character outside the
            World's id alphabet, or the id is longer than :data:`MAX_ID_LENGTH`.
    """
    for label, part, option in (("module", module, "module="), ("name", name, "name=")):
        if not part or "//" in part or not _ALPHABET.fullmatch(part):
            raise InvalidDefinition(
                f"{prefix} {function!r}: its id {label} part {part!r} is not usable in an "
                f"id: use characters from {_ALPHABET_TEXT}, no '//', not empty; "
                f"pass {option}'...' to choose a stable one",
                function=function,
            )
    ident = f"{prefix}//{module}//{name}"
    if len(ident) > MAX_ID_LENGTH:
        raise InvalidDefinition(
            f"{prefix} {function!r}: its id {ident!r} has {len(ident)} characters, more "
            f"than {MAX_ID_LENGTH}; pass a shorter name='...' (or module='...')",
            function=function,
        )
    return ident
