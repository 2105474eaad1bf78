"""``build_manifest``: the workflows, steps and serializable classes of a source tree.

Python has no build step that could list definitions, so the manifest imports
every module under the path (definitions register as they are imported) and
reads the registries.  A nested step registers only when its enclosing function
runs, so nested steps are also found in the source (a ``def`` inside a function,
decorated with ``step`` or ``something.step``), with the options written as literals.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._authoring_errors import InvalidDefinition, ManifestError
from ._definitions import StepDef, WorkflowDef, all_steps, all_workflows, check_step, source_of
from ._ids import make_id
from .serialization import default_registry

__all__ = ["build_manifest"]

_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})
# Importing these runs a program (setup(), a command line), not definitions.
_SKIPPED_FILES = frozenset({"setup.py", "__main__.py"})
_HOOKS = ("__durasim_serialize__", "__durasim_deserialize__")


def build_manifest(path: str | Path) -> dict[str, Any]:
    """Import every module under ``path`` and list what it defines.

    Args:
        path: a ``.py`` file, a package, or a folder of modules and packages.  Its
            sys.path root (the folder above the top package) is put on ``sys.path``
            while importing.

    Returns:
        ``{"workflows": [...], "steps": [...], "classes": [...]}``, each sorted by
        id and JSON-ready.  Sources are ``file:line``, the file relative to the
        sys.path root when it lies under it.

    Raises:
        ManifestError: the path does not exist, is not Python, or a module fails
            to import (the message names the module and the error).
        InvalidDefinition: a definition is unusable only now that its module is
            complete (a method step's class cannot be serialized, or a class has
            one of the two serialization hooks).
    """
    given = Path(path)
    if not given.exists():
        raise ManifestError(
            f"no file or folder at {str(given)!r}: pass a .py file, a package or a folder",
            path=str(given),
            module="",
        )
    root = given.resolve()
    base, found = _discover(root)
    names: set[str] = set()
    with _on_sys_path(base):
        for name, file in found:
            _import(name, file)
            names.add(name)
    steps = {s.step_id: _step_entry(s, base) for s in all_steps() if s.fn.__module__ in names}
    for name, file in found:
        for ident, entry in _nested_steps_in_source(name, file, base):
            steps.setdefault(ident, entry)
    workflows = [_workflow_entry(w, base) for w in all_workflows() if w.fn.__module__ in names]
    classes = [_class_entry(c, base) for name in sorted(names) for c in _classes_of(name)]
    return {
        "workflows": sorted(workflows, key=lambda e: str(e["workflow_id"])),
        "steps": [steps[i] for i in sorted(steps)],
        "classes": sorted((c for c in classes if c is not None), key=lambda e: str(e["class_id"])),
    }


# -- finding and importing modules -------------------------------------------------


def _sys_path_root(start: Path) -> Path:
    folder = start
    while (folder / "__init__.py").is_file():
        folder = folder.parent
    return folder


def _discover(root: Path) -> tuple[Path, list[tuple[str, Path]]]:
    if root.is_file():
        if root.suffix != ".py":
            raise ManifestError(
                f"{str(root)!r} is not a Python file: pass a .py file, a package or a folder",
                path=str(root),
                module="",
            )
        base = _sys_path_root(root.parent)
        files = [root]
    else:
        base = _sys_path_root(root)
        files = sorted(_python_files(root))
    found = []
    for file in files:
        name = _module_name(file, base)
        if name is not None:
            found.append((name, file))
    return base, found


def _python_files(folder: Path) -> Iterator[Path]:
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            if (
                entry.name.startswith(".")
                or entry.name in _SKIPPED_DIRS
                or (entry / "pyvenv.cfg").exists()
            ):
                continue
            yield from _python_files(entry)
        elif entry.suffix == ".py" and entry.name not in _SKIPPED_FILES:
            yield entry


def _module_name(file: Path, base: Path) -> str | None:
    parts = list(file.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None  # not importable by name (my-script.py): nothing can refer to it
    return ".".join(parts)


@contextlib.contextmanager
def _on_sys_path(base: Path) -> Iterator[None]:
    entry = str(base)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def _import(name: str, file: Path) -> None:
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve() != file:
            raise ManifestError(
                f"module {name!r} is already imported from {where}, not from {file}; "
                "build the manifest in a fresh process (or rename one of them)",
                path=str(file),
                module=name,
            )
    try:
        importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        raise ManifestError(
            f"importing module {name!r} ({file}) failed: {type(exc).__name__}: {exc}",
            path=str(file),
            module=name,
        ) from exc


# -- entries -----------------------------------------------------------------------


def _relative(source: str, base: Path) -> str:
    file, sep, line = source.rpartition(":")
    if not sep:
        return source
    try:
        return f"{Path(file).resolve().relative_to(base).as_posix()}:{line}"
    except ValueError:
        return source


def _step_entry(definition: StepDef, base: Path) -> dict[str, Any]:
    check_step(definition)
    fn = definition.fn
    return {
        "step_id": definition.step_id,
        "name": definition.name,
        "module": fn.__module__,
        "qualname": fn.__qualname__,
        "kind": definition.kind,
        "max_retries": definition.max_retries,
        "is_async": definition.is_async,
        "source": _relative(source_of(fn), base),
    }


def _workflow_entry(definition: WorkflowDef, base: Path) -> dict[str, Any]:
    fn = definition.fn
    return {
        "workflow_id": definition.workflow_id,
        "name": definition.name,
        "module": fn.__module__,
        "qualname": fn.__qualname__,
        "source": _relative(source_of(fn), base),
    }


def _classes_of(module_name: str) -> Iterator[type]:
    module = sys.modules[module_name]
    seen: set[int] = set()

    def walk(namespace: dict[str, Any], prefix: str) -> Iterator[type]:
        for attr, value in namespace.items():
            if not isinstance(value, type) or id(value) in seen:
                continue
            # Only classes defined here, under this very name (not imports or aliases).
            if value.__module__ != module_name or value.__qualname__ != prefix + attr:
                continue
            seen.add(id(value))
            yield value
            yield from walk(dict(vars(value)), f"{value.__qualname__}.")

    yield from walk(dict(vars(module)), "")


def _class_entry(cls: type, base: Path) -> dict[str, Any] | None:
    own = [hook for hook in _HOOKS if any(hook in k.__dict__ for k in cls.__mro__)]
    if len(own) == 1:
        missing = _HOOKS[1] if own[0] == _HOOKS[0] else _HOOKS[0]
        raise InvalidDefinition(
            f"class {cls.__module__}.{cls.__qualname__} defines only {own[0]}; define "
            f"{missing} too (both or neither)",
            function=cls.__qualname__,
        )
    entry = default_registry().entry_for_class(cls)
    if entry is None:
        return None
    source = "<unknown>"
    with contextlib.suppress(OSError, TypeError):
        source = f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    return {
        "class_id": entry.class_id,
        "kind": entry.kind,
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "source": _relative(source, base),
    }


# -- nested steps, from the source -------------------------------------------------


def _is_step_decorator(node: ast.expr) -> ast.Call | bool:
    target = node.func if isinstance(node, ast.Call) else node
    named = (isinstance(target, ast.Name) and target.id == "step") or (
        isinstance(target, ast.Attribute) and target.attr == "step"
    )
    if not named:
        return False
    return node if isinstance(node, ast.Call) else True


def _literal_options(call: ast.Call | bool) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if isinstance(call, ast.Call):
        for keyword in call.keywords:
            if keyword.arg is not None and isinstance(keyword.value, ast.Constant):
                options[keyword.arg] = keyword.value.value
    return options


def _nested_steps_in_source(
    module: str, file: Path, base: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return  # the import succeeded, so the registry already has what it defined
    relative = _relative(f"{file}:0", base).rpartition(":")[0]

    def visit(node: ast.AST, path: str, in_function: bool) -> Iterator[tuple[str, dict[str, Any]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{path}{child.name}"
                if in_function:
                    yield from _nested_entry(child, module, qual, relative)
                yield from visit(child, f"{qual}.<locals>.", in_function=True)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{path}{child.name}.", in_function=in_function)
            else:
                yield from visit(child, path, in_function)

    yield from visit(tree, "", in_function=False)


def _nested_entry(
    node: ast.FunctionDef | ast.AsyncFunctionDef, module: str, qualname: str, file: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    for decorator in node.decorator_list:
        found = _is_step_decorator(decorator)
        if not found:
            continue
        options = _literal_options(found)
        parts = qualname.split(".")
        if len(parts) > 1 and parts[-2] != "<locals>":
            return  # a method of a class inside a function: registered with its class
        name = options.get("name")
        part = name if isinstance(name, str) else qualname.replace(".<locals>.", "/")
        spec = options.get("module")
        try:
            ident = make_id(
                "step", spec if isinstance(spec, str) else module, part, function=qualname
            )
        except InvalidDefinition:
            return  # refused when the enclosing function runs; nothing to list
        retries = options.get("max_retries", 3)
        first_line = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        yield (
            ident,
            {
                "step_id": ident,
                "name": part,
                "module": module,
                "qualname": qualname,
                "kind": "nested",
                "max_retries": retries if isinstance(retries, int) else None,
                "is_async": isinstance(node, ast.AsyncFunctionDef),
                "source": f"{file}:{first_line}",
            },
        )
        return
