"""Seeds: one explored execution as a durable string.

``durasim:v1:<base64>``: the base64 (URL-safe, unpadded) of zlib-compressed
JSON holding everything an example was made of: where the workflow (and the
property, the per-example set-up and the World factory, when they are
importable) live as ``module:qualname``, the arguments (durasim-serialized),
the fault configuration the example drew (enabled kinds, odds, maximum,
lease length and renewal interval), the external actions (hook payloads and
the interception point at which each is sent, the point of a cancel), and the
scheduler's answers in the order it asked (trailing zeros dropped: an exhausted
sequence answers 0), and, when the fresh-process replay judged it, that
process's hash seed and the exploring process's own ``PYTHONHASHSEED``.
It encodes the choices themselves, not a Hypothesis database entry, so it
survives Hypothesis upgrades and needs no database.
"""

from __future__ import annotations

import base64
import importlib
import json
import zlib
from collections.abc import Callable
from typing import Any

import attrs

from durasim.runtime.lowlevel import DEFAULT_LEASE_SECONDS
from durasim.runtime.serialization import deserialize, serialize
from durasim.worlds import DurasimError

__all__ = ["SEED_PREFIX", "ExampleConfig", "SeedError", "object_ref", "resolve_ref"]

SEED_PREFIX = "durasim:v1:"


class SeedError(DurasimError, ValueError):
    """A seed string that cannot be decoded, or names something that cannot be imported."""


@attrs.frozen(kw_only=True)
class ExampleConfig:
    """One example: what ran and every decision taken (a seed decodes to this).

    Attributes:
        workflow: ``module:qualname`` of the workflow function.
        args: its positional arguments.
        faults: the fault kinds enabled in this example (a swarm subset).
        fault_odds: a fault is injected when ``choose(fault_odds)`` answers its last value.
        max_faults: at most this many faults.
        lease_seconds: how long a delivery's lease lasts without renewal.
        renew_every: how often it is renewed (``None``: derived, as a ``Worker`` does).
        hooks: ``(token, payload)`` the harness sends to the run's hooks.
        hook_points: per hook, the interception point (ordinal) at which it is
            sent; 0 means "once the run waits for it".
        cancel_at: the interception point at which the run is cancelled (0: never).
        wake_up_at: interception points at which ``Run.wake_up()`` completes the
            run's open sleeps early (an operator racing the deliveries).
        upgrade: ``module:qualname`` of the workflow's next version, or "".
        upgrade_at: the interception point at which the code changes to it.
        choices: the scheduler's answers, in order.
        property: ``module:qualname`` of the property, or "".
        setup: ``module:qualname`` of the per-example set-up, or "".
        world: ``module:qualname`` of the World factory, or "" (the in-memory World).
        fresh_process: the ``PYTHONHASHSEED`` of the fresh-process replay that
            judged the example, or ``None`` when that check was off.
        queue: ``"sim"`` or ``"world"``: whose queue the simulated runtime used.
        hash_seed: the exploring process's ``PYTHONHASHSEED`` ("" when unset or
            ``random``): ``durasim reproduce`` runs under it, so sets iterate alike.
    """

    workflow: str
    args: tuple[Any, ...] = ()
    faults: tuple[str, ...] = ()
    fault_odds: int = 20
    max_faults: int = 3
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_every: float | None = None
    hooks: tuple[tuple[str, Any], ...] = ()
    hook_points: tuple[int, ...] = ()
    cancel_at: int = 0
    wake_up_at: tuple[int, ...] = ()
    upgrade: str = ""
    upgrade_at: int = 0
    choices: tuple[int, ...] = ()
    property: str = ""
    setup: str = ""
    world: str = ""
    fresh_process: int | None = None
    hash_seed: str = ""
    queue: str = "sim"

    def to_seed(self) -> str:
        """The seed string of this example."""
        choices = list(self.choices)
        while choices and choices[-1] == 0:
            choices.pop()
        doc: dict[str, Any] = {
            "wf": self.workflow,
            "args": serialize(tuple(self.args)).decode("utf-8"),
            "faults": list(self.faults),
            "odds": self.fault_odds,
            "max": self.max_faults,
            "lease": self.lease_seconds,
            "choices": choices,
        }
        if self.renew_every is not None:
            doc["renew"] = self.renew_every
        if self.hooks:
            doc["hooks"] = serialize(tuple(self.hooks)).decode("utf-8")
            doc["hook_points"] = list(self.hook_points)
        if self.cancel_at:
            doc["cancel"] = self.cancel_at
        if self.wake_up_at:
            doc["wake"] = list(self.wake_up_at)
        if self.upgrade:
            doc["upgrade"] = self.upgrade
            doc["upgrade_at"] = self.upgrade_at
        for key, value in (("prop", self.property), ("setup", self.setup), ("world", self.world)):
            if value:
                doc[key] = value
        if self.fresh_process is not None:
            doc["fresh"] = self.fresh_process
        if self.hash_seed:
            doc["phs"] = self.hash_seed
        if self.queue != "sim":
            doc["queue"] = self.queue
        raw = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        packed = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
        return SEED_PREFIX + packed

    @classmethod
    def from_seed(cls, seed: str) -> ExampleConfig:
        """Decode a seed string (see the module docstring)."""
        seed = seed.strip()
        if not seed.startswith(SEED_PREFIX):
            raise SeedError(
                f"{seed[:24]!r}... is not a durasim seed: it must start with {SEED_PREFIX!r} "
                "(copy the whole line explore() printed)"
            )
        body = seed[len(SEED_PREFIX) :]
        try:
            raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            doc = json.loads(raw)
            hooks = deserialize(doc["hooks"].encode()) if "hooks" in doc else ()
            return cls(
                workflow=doc["wf"],
                args=tuple(deserialize(doc["args"].encode())),
                faults=tuple(doc["faults"]),
                fault_odds=int(doc["odds"]),
                max_faults=int(doc["max"]),
                lease_seconds=float(doc["lease"]),
                renew_every=float(doc["renew"]) if "renew" in doc else None,
                hooks=tuple((str(t), p) for t, p in hooks),
                hook_points=tuple(int(p) for p in doc.get("hook_points", ())),
                cancel_at=int(doc.get("cancel", 0)),
                wake_up_at=tuple(int(p) for p in doc.get("wake", ())),
                upgrade=str(doc.get("upgrade", "")),
                upgrade_at=int(doc.get("upgrade_at", 0)),
                choices=tuple(int(c) for c in doc["choices"]),
                property=doc.get("prop", ""),
                setup=doc.get("setup", ""),
                world=doc.get("world", ""),
                fresh_process=int(doc["fresh"]) if "fresh" in doc else None,
                hash_seed=str(doc.get("phs", "")),
                queue=str(doc.get("queue", "sim")),
            )
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            raise SeedError(f"the seed is damaged ({exc}): copy the whole line again") from exc


def object_ref(obj: object) -> str:
    """``module:qualname`` of a module-level object, or "" if it cannot be imported by name."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return ""
    try:
        found = resolve_ref(f"{module}:{qualname}")
    except SeedError:
        return ""
    return f"{module}:{qualname}" if found is obj else ""


def resolve_ref(ref: str) -> Callable[..., Any]:
    """Import ``module:qualname`` and return the object."""
    module_name, _, qualname = ref.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except DurasimError as exc:
        # A conformance adapter whose factory cannot be loaded says why itself.
        raise SeedError(f"cannot load {ref!r}: {exc}") from exc
    except Exception as exc:
        # ImportError, AttributeError, or whatever importing the module raised:
        # one line, not a traceback.
        raise SeedError(
            f"cannot import {ref!r} ({type(exc).__name__}: {exc}): run from the directory "
            "the exploration ran in, or name the module with --import MODULE (or put it on "
            "PYTHONPATH)"
        ) from exc
    if not callable(found):
        raise SeedError(f"{ref!r} is not callable")
    return found  # type: ignore[no-any-return]
