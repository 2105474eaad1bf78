"""The check before a workflow runs: the escapes the sandbox cannot close while it runs.

Some ways out of the sandbox cannot be caught when they are called:

* ``datetime.now()``, ``datetime.today()``, ``datetime.utcnow()`` and
  ``date.today()`` are C methods of C types, which cannot be replaced;
* a name bound when a module was imported holds the object of that moment:
  ``from time import time`` (or ``from random import random``, ``from uuid import
  uuid4``, ``from os import urandom``) made before the sandbox was first installed
  keeps the original function, not the redirected one;
* a ``random.Random`` made at import time is shared by every run and replay of
  the process, so what it returns depends on what ran before.

:func:`check_workflow` finds them in the code before the workflow first runs in a
process: it reads the bytecode of the workflow function, of the functions nested
in it (not the steps written there), and transitively of the plain functions it
reaches that live in the project's own modules (not the standard library,
installed packages, durasim, or steps: those may do anything).  Every global
name and attribute chain (``datetime.datetime.now``) is resolved through the
function's globals without running any code (module and class dictionaries
only), and the object found is compared by identity with the originals the
sandbox replaced (``_guards.remember``).  The result is cached per function: after
the first delivery the check costs one dictionary lookup.

Static reading sees every branch, taken or not: a flagged name in a branch the
workflow never takes is still reported (move it to a step).  It does not see
objects reached through arguments, locals or instance attributes that are
not in an instance's ``__dict__`` at check time.
"""

from __future__ import annotations

import ast
import datetime
import dis
import functools
import inspect
import io
import linecache
import logging
import os
import random
import site
import socket
import sys
import sysconfig
import textwrap
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from ._decorators import step
from ._determinism import ensure_installed
from ._errors import WorkflowSandboxError
from ._guards import original

__all__ = ["SandboxFinding", "check_workflow", "findings_of"]

_MISSING = object()
_log = logging.getLogger("durasim.runtime")

#: How many functions one workflow's check reads at most (a bound, not a budget).
MAX_FUNCTIONS = 2000

_WALL_CLOCK_METHODS = {
    datetime.datetime: frozenset({"now", "today", "utcnow"}),
    datetime.date: frozenset({"today"}),
}
_NOW = "durasim.runtime.now() (the run's clock, a timezone-aware datetime)"
_WALL_CLOCK_ALTERNATIVES = {
    "now": _NOW,
    "utcnow": _NOW,
    "today": f"{_NOW}; for a date, durasim.runtime.now().date()",
}
_RANDOM_ALTERNATIVE = (
    "make the generator inside the workflow (`random.Random()` there is seeded from the "
    "run), or use the module-level functions of `random`"
)


@attrs.frozen(kw_only=True)
class SandboxFinding:
    """One escape found in workflow code before it runs.

    Attributes:
        name: the name or attribute chain as the code reads it (``time``,
            ``datetime.now``).
        module: the module whose code reads it.
        function: the qualified name of the function that reads it.
        line: the line that reads it.
        dotted: what the name is (``time.time``, ``datetime.datetime.now``).
        why: why it would not replay, with how it was bound.
        alternative: the deterministic alternative.
    """

    name: str
    module: str
    function: str
    line: int
    dotted: str
    why: str
    alternative: str

    def render(self) -> str:
        """The finding as one sentence of an error message."""
        return (
            f"`{self.name}` (module {self.module}, function {self.function}, line "
            f"{self.line}) {self.why}: {self.alternative}"
        )


_CHECKED: weakref.WeakKeyDictionary[Callable[..., Any], tuple[SandboxFinding, ...]] = (
    weakref.WeakKeyDictionary()
)


def check_workflow(fn: Callable[..., Any], *, workflow_name: str) -> WorkflowSandboxError | None:
    """The error the workflow ``fn`` must fail with, or None if its code has no escape.

    A new error each call (an exception carries its traceback); the reading
    behind it is cached per function.
    """
    found = _CHECKED.get(fn)
    if found is None:
        try:
            found = findings_of(fn)
        except Exception:  # a safety net must not break the run it guards
            _log.exception("sandbox check of workflow %r failed; the run goes on", workflow_name)
            found = ()
        _CHECKED[fn] = found
    if not found:
        return None
    first = found[0]
    more = ""
    if len(found) > 1:
        others = ", ".join(f"`{f.name}` ({f.module} line {f.line}, {f.dotted})" for f in found[1:6])
        more = f" Also {others}{' ...' if len(found) > 6 else ''}."
    return WorkflowSandboxError(
        f"workflow {workflow_name!r} cannot replay identically: {first.render()}.{more} "
        "This was found by reading the code before the workflow ran; steps may do "
        "anything, so code that needs the real value belongs in a @step",
        call=first.dotted,
        name=first.name,
        module=first.module,
        alternative=first.alternative,
    )


def findings_of(fn: Callable[..., Any]) -> tuple[SandboxFinding, ...]:
    """Every escape in ``fn`` and the project functions it reaches (uncached)."""
    ensure_installed()  # the module attributes must be the redirected ones
    findings: dict[tuple[str, str], SandboxFinding] = {}
    seen: set[int] = set()
    queue: list[types.FunctionType] = []
    start = _as_function(fn)
    if start is not None:
        queue.append(start)
    while queue and len(seen) < MAX_FUNCTIONS:
        function = queue.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        reader = _Reader(function)
        reader.read(function.__code__)
        for finding in reader.findings:
            findings.setdefault((finding.module, finding.name), finding)
        queue.extend(f for f in reader.reached if id(f) not in seen)
    return tuple(sorted(findings.values(), key=lambda f: (f.module, f.line, f.name)))


class _Reader:
    """Reads one function's bytecode (and its nested code) for escapes and callees."""

    def __init__(self, function: types.FunctionType) -> None:
        self.function = function
        self.globals = function.__globals__
        builtins = self.globals.get("__builtins__", {})
        self.builtins = vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
        cells = function.__closure__ or ()
        self.closure: dict[str, Any] = {}
        for name, cell in zip(function.__code__.co_freevars, cells, strict=False):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # an empty cell (the name is not assigned yet)
                continue
        self.module = str(getattr(function, "__module__", "?"))
        self.findings: list[SandboxFinding] = []
        self.reached: list[types.FunctionType] = []

    def read(self, code: types.CodeType) -> None:
        for chain, line in _chains(code):
            self._resolve(chain, code, line)
        for const in code.co_consts:
            if isinstance(const, types.CodeType) and not _is_step_code(const, self.globals):
                self.read(const)

    def _root(self, kind: str, name: str, imported: Any) -> Any:
        if kind == "global":
            return self.globals.get(name, self.builtins.get(name, _MISSING))
        if kind == "deref":
            return self.closure.get(name, _MISSING)
        return imported

    def _resolve(self, chain: _Chain, code: types.CodeType, line: int) -> None:
        obj = self._root(chain.kind, chain.names[0], chain.imported)
        path = [chain.names[0]]
        for attr in (*chain.names[1:], None):
            if obj is _MISSING:
                return
            finding = self._judge(obj, path, code, line, global_name=chain.kind == "global")
            if finding is not None:
                self.findings.append(finding)
                return
            if attr is None:
                return
            wall = _wall_clock_method(obj, attr)
            if wall is not None:
                path.append(attr)
                self.findings.append(self._wall_clock(wall, path, code, line))
                return
            obj = _static_attr(obj, attr)
            path.append(attr)

    def _judge(
        self, obj: Any, path: list[str], code: types.CodeType, line: int, *, global_name: bool
    ) -> SandboxFinding | None:
        name = ".".join(path)
        known = original(obj)
        if known is not None:
            bound = ""
            if global_name and len(path) == 1:
                module, _, attr = known.dotted.rpartition(".")
                alias = f" as {name}" if name != attr else ""
                bound = f", bound when module {self.module} was imported (`from {module} "
                bound += f"import {attr}{alias}`), so it is not redirected inside workflows"
            return self._finding(
                name,
                code,
                line,
                known.dotted,
                f"is the original {known.dotted}{bound}",
                known.alternative,
            )
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, type) and not isinstance(obj, type):
            wall = _wall_clock_method(owner, getattr(obj, "__name__", ""))
            if wall is not None:
                return self._wall_clock(wall, path, code, line)
        if _is_shared_random(obj) or (
            isinstance(obj, types.MethodType | types.BuiltinMethodType) and _is_shared_random(owner)
        ):
            return self._finding(
                name,
                code,
                line,
                "random.Random",
                "is (a method of) a random.Random made when its module was imported: every "
                "run and replay of the process shares its state, so it returns other values "
                "on replay",
                _RANDOM_ALTERNATIVE,
            )
        handle = _open_handle(obj)
        if handle is not None:
            return self._finding(
                name,
                code,
                line,
                handle,
                f"is {handle} opened outside the workflow: reading or writing it reaches "
                "outside the log, and no event is raised when it is used",
                "open it, and use it, inside a @step (pass the data the workflow needs as "
                "step results)",
            )
        self.reached.extend(_functions_in(obj))
        return None

    def _wall_clock(
        self, dotted: str, path: list[str], code: types.CodeType, line: int
    ) -> SandboxFinding:
        return self._finding(
            ".".join(path),
            code,
            line,
            dotted,
            f"is {dotted}, which reads the wall clock (C code the sandbox cannot redirect)",
            f"use {_WALL_CLOCK_ALTERNATIVES[dotted.rpartition('.')[2]]}",
        )

    def _finding(  # noqa: PLR0917 -- one record, built in three places
        self, name: str, code: types.CodeType, line: int, dotted: str, why: str, alternative: str
    ) -> SandboxFinding:
        return SandboxFinding(
            name=name,
            module=self.module,
            function=getattr(code, "co_qualname", code.co_name),
            line=line,
            dotted=dotted,
            why=why,
            alternative=alternative,
        )


def _wall_clock_method(owner: Any, attr: str) -> str | None:
    """``datetime.datetime.now`` if ``owner.attr`` is a wall-clock method of datetime/date."""
    if not isinstance(owner, type) or not issubclass(owner, datetime.date):
        return None
    for base, names in _WALL_CLOCK_METHODS.items():
        if issubclass(owner, base) and attr in names:
            return f"datetime.{base.__name__}.{attr}"
    return None


def _open_handle(obj: Any) -> str | None:
    """What ``obj`` is if it is a file, socket or database connection made elsewhere."""
    if isinstance(obj, io.IOBase):
        # Writing to the terminal (print, logging) is not an escape of the run's data.
        if any(
            obj is getattr(sys, n, None) for n in ("stdout", "stderr", "__stdout__", "__stderr__")
        ):
            return None
        return f"an open file ({type(obj).__name__})"
    if isinstance(obj, socket.socket):
        return "an open socket"
    sqlite3 = sys.modules.get("sqlite3")  # not imported: no connection can exist
    if sqlite3 is not None and isinstance(obj, sqlite3.Connection):
        return "an open sqlite3 connection"
    return None


def _is_shared_random(obj: Any) -> bool:
    return isinstance(obj, random.Random) and not isinstance(obj, random.SystemRandom)


# -- what to read next -------------------------------------------------------------------


def _as_function(obj: Any) -> types.FunctionType | None:
    while isinstance(obj, types.MethodType | staticmethod | classmethod):
        obj = obj.__func__
    if isinstance(obj, functools.partial):
        return _as_function(obj.func)
    if isinstance(obj, property):
        return _as_function(obj.fget)
    return obj if isinstance(obj, types.FunctionType) else None


def _functions_in(obj: Any) -> Iterator[types.FunctionType]:
    """The project functions reading ``obj`` leads to (a class: what making one runs)."""
    if isinstance(obj, type):
        if _is_project_module(obj.__module__):
            for name in ("__init__", "__post_init__", "__new__"):
                found = _as_function(vars(obj).get(name))
                if found is not None:
                    yield found
        return
    function = _as_function(obj)
    if function is not None and _is_project_module(function.__module__):
        yield function


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.update(getattr(site, "getsitepackages", list)())
    user = getattr(site, "getusersitepackages", None)
    if user is not None:
        dirs.add(user())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


@functools.cache
def _is_project_module(name: object) -> bool:
    """Whether ``name`` is the project's own code (not the stdlib, a package, durasim)."""
    if not isinstance(name, str) or name == "durasim" or name.startswith("durasim."):
        return False
    module = sys.modules.get(name)
    if module is None:
        return False
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return name == "__main__"  # a notebook or an interactive session
    return not os.path.realpath(file).startswith(_library_dirs())


def _is_step_code(code: types.CodeType, namespace: dict[str, Any]) -> bool:
    """Whether a nested ``def`` is decorated with ``@step`` (its body may do anything)."""
    first = linecache.getline(code.co_filename, code.co_firstlineno).lstrip()
    if not first.startswith("@"):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for decorator in node.decorator_list:
        expr = decorator.func if isinstance(decorator, ast.Call) else decorator
        names: list[str] = []
        while isinstance(expr, ast.Attribute):
            names.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            continue
        obj: Any = namespace.get(expr.id, _MISSING)
        for attr in reversed(names):
            obj = _static_attr(obj, attr)
        if obj is step:
            return True
    return False


def _static_attr(obj: Any, attr: str) -> Any:
    """``obj.attr`` without running code: module and class dictionaries, an instance dict."""
    if obj is _MISSING:
        return _MISSING
    if isinstance(obj, types.ModuleType):
        return vars(obj).get(attr, _MISSING)
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if attr in vars(klass):
                return vars(klass)[attr]
        return _MISSING
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return _MISSING
    return namespace.get(attr, _MISSING) if isinstance(namespace, dict) else _MISSING


# -- bytecode --------------------------------------------------------------------------


@attrs.frozen
class _Chain:
    kind: str  # "global", "deref" or "import" (a local bound by an import statement)
    names: tuple[str, ...]
    imported: Any = None


_LOAD_LOCAL = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
_STORE_LOCAL = frozenset({"STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL"})
_NEUTRAL = frozenset({"EXTENDED_ARG", "CACHE", "NOP"})


def _member(module: Any, name: str) -> Any:
    found = _static_attr(module, name)
    if found is _MISSING and isinstance(module, types.ModuleType):
        found = sys.modules.get(f"{module.__name__}.{name}", _MISSING)
    return found


def _chains(code: types.CodeType) -> Iterator[tuple[_Chain, int]]:
    """Each global (or closure, or imported local) name read by ``code``, with the
    attributes read from it right after (``datetime.datetime.now``), and the line.

    Works on the bytecode of Python 3.11 to 3.14: a chain is a ``LOAD_GLOBAL``
    (``LOAD_DEREF``, ``LOAD_NAME``) followed by ``LOAD_ATTR`` / ``LOAD_METHOD``.
    """
    imported: dict[str, Any] = {}
    pending: Any = _MISSING  # the value an import statement is about to store
    base: Any = _MISSING  # the module an import statement reads from
    previous_const: Any = None
    current: _Chain | None = None
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _NEUTRAL:
            continue
        positions = getattr(ins, "positions", None)
        here = line if positions is None or positions.lineno is None else positions.lineno
        if current is not None:
            if op in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(ins.argval, str):
                current = attrs.evolve(current, names=(*current.names, ins.argval))
                continue
            yield current, line
            current = None
        line = here
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            current = _Chain("global", (str(ins.argval),))
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            current = _Chain("deref", (str(ins.argval),))
        elif op in _LOAD_LOCAL and ins.argval in imported:
            current = _Chain("import", (str(ins.argval),), imported[ins.argval])
        elif op == "IMPORT_NAME":
            name = str(ins.argval)
            # `import a.b` binds a; `from a.b import c` and `import a.b as d` read a.b
            base = sys.modules.get(
                name if previous_const is not None else name.partition(".")[0], _MISSING
            )
            pending = base
        elif op == "IMPORT_FROM":
            pending = _member(base, str(ins.argval))
        elif op in _STORE_LOCAL and pending is not _MISSING:
            imported[str(ins.argval)] = pending
            pending = _MISSING
        elif op in ("SWAP", "POP_TOP"):
            if pending is not _MISSING:
                base = pending  # `import a.b.c as d`: the next IMPORT_FROM reads a.b
        elif op != "LOAD_CONST":
            pending = _MISSING
        previous_const = ins.argval if op == "LOAD_CONST" else None
    if current is not None:
        yield current, line
