"""Every exception class durasim defines is under ``DurasimError`` (STYLE.md, item 9).

The exceptions: a control-flow signal derives from ``BaseException`` (not
``Exception``) so that no ``except Exception`` swallows it, and its docstring says
it is one; a private class (``_Name``) is caught inside its own module and never
reaches a caller.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from durasim.worlds import DurasimError

PACKAGES = ("worlds", "runtime", "sim", "checkers", "scenarios")
#: Not imported: ``__main__`` runs the command line, the suite's test modules are
#: imported by pytest (importing them here would bypass assertion rewriting).
SKIPPED = (".__main__", ".conformance.suite")


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for top in PACKAGES:
        package = importlib.import_module(f"durasim.{top}")
        names = [package.__name__]
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"durasim.{top}.")]
        for name in names:
            if any(skip in name for skip in SKIPPED):
                continue
            module = importlib.import_module(name)
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module.__name__
                ):
                    found.append(value)
    return found


def test_the_walk_finds_the_errors() -> None:
    names = {cls.__name__ for cls in _exception_classes()}
    assert {"DurasimError", "SeedError", "FactoryError", "SimError", "Crashed"} <= names


def test_every_exception_is_a_durasim_error() -> None:
    outside = [
        f"{cls.__module__}.{cls.__qualname__} ({', '.join(b.__name__ for b in cls.__mro__[1:])})"
        for cls in _exception_classes()
        if issubclass(cls, Exception)
        and not issubclass(cls, DurasimError)
        and not cls.__name__.startswith("_")
    ]
    assert not outside, (
        "exception classes outside the DurasimError tree (derive them from DurasimError, "
        f"and the matching builtin): {outside}"
    )


def test_control_flow_signals_say_so() -> None:
    silent = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _exception_classes()
        if not issubclass(cls, Exception) and "control-flow signal" not in (cls.__doc__ or "")
    ]
    assert not silent, (
        "BaseException subclasses whose docstring does not say they are a control-flow "
        f"signal (say why they must escape `except Exception`): {silent}"
    )


def test_seed_and_factory_errors_keep_their_builtin() -> None:
    from durasim.scenarios import SeedError
    from durasim.worlds import FactoryError

    for cls in (SeedError, FactoryError):
        assert issubclass(cls, DurasimError)
        assert issubclass(cls, ValueError)
