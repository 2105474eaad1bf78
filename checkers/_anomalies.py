"""Naming what a concurrent history shows: read invariants and anomalies.

:func:`read_anomalies` checks every read of a history on its own and against
the reads and writes that finished before it began:

* a page is a slice of the log with no hole (positions ``after_seq + 1 ...``);
* its snapshot is never ahead of it (a page that says it is the end of the log,
  ``has_more=False``, ends at the snapshot's ``seq``);
* a later read extends an earlier one: a position seen (or written) before a
  read began is shown by it, unchanged, and its snapshot never goes backwards.

:func:`name_anomaly` looks at a history the linearizability search could not
explain and names the first anomaly it recognizes (lost update, two terminal
events, duplicate token holder ...), with the records that show it.  The list
is in :data:`ANOMALIES`; docs/conformance.md explains each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import attrs

from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    BatchResult,
    ChunkPage,
    Event,
    EventPage,
    EventRequest,
    EventResult,
    EventType,
    HookStatus,
    fold_log,
)

from ._linear import Record

__all__ = ["ANOMALIES", "Anomaly", "name_anomaly", "read_anomalies"]

#: Every anomaly the concurrency checker names, with what it means.
ANOMALIES = {
    "crash": "a call raised an exception that is not a WorldError",
    "page with a hole": "a page of events (or chunks) skips a position",
    "read ahead of its page": "a snapshot counts events its page, which says it is the end, lacks",
    "stale read": "a read misses (or reverts) a write or a read that finished before it began",
    "position given twice": "two accepted writes were answered with the same position",
    "lost update": "an accepted write's event is not at its position in the final log",
    "non-atomic batch": "part of a batch was visible, or stayed after the batch was refused",
    "refused write that committed": "a write answered with a refusal, and its event is in the log",
    "two terminal events": "a run (or a step) got two terminal events",
    "duplicate token holder": "two live hooks hold one token",
    "duplicate resume": "one resume_id was appended twice in a run",
    "overwritten stream chunk": "two stream writes were given the same index, or a chunk changed",
    "lost stream chunk": "a stream holds fewer chunks than its accepted writes appended",
    "write after close": "a stream write was accepted after a close had returned",
    "not linearizable": "no serial order on the reference explains every answer",
    "stuck": "the group's calls did not all return in time (a deadlock, a lost wake-up)",
}


@attrs.frozen(kw_only=True)
class Anomaly:
    """One named anomaly of a history.

    Attributes:
        name: a key of :data:`ANOMALIES`.
        detail: what happened, naming runs, positions and record numbers.
        records: the records that show it (their indexes).
    """

    name: str
    detail: str
    records: tuple[int, ...] = ()


# -- what a history holds ------------------------------------------------------------------


def _pages(records: Sequence[Record]) -> Iterator[tuple[Record, str, int, int, EventPage]]:
    """Every page read: record, run, after_seq, limit, page."""
    for record in records:
        if record.call.method == "events.list" and record.ok:
            page = record.value
            after = int(record.call.option("after_seq", 0))
            limit = int(record.call.option("limit", 1000))
            yield record, record.call.args[0], after, limit, page


def _accepted(records: Sequence[Record]) -> Iterator[tuple[Record, tuple[Event, ...]]]:
    """Every accepted write with the events it appended."""
    for record in records:
        if not record.ok:
            continue
        value = record.value
        if isinstance(value, EventResult) and value.allocated and value.event is not None:
            yield record, (value.event,)
        elif isinstance(value, BatchResult) and value.events:
            yield record, value.events


def _final_logs(records: Sequence[Record]) -> dict[str, tuple[Event, ...]]:
    """Each run's whole log, as the last complete final read showed it."""
    logs: dict[str, tuple[Event, ...]] = {}
    for record, run_id, after, _, page in _pages(records):
        if record.phase == "final" and after == 0 and not page.has_more:
            logs[run_id] = page.events
    return logs


def _requests(record: Record) -> list[EventRequest]:
    if record.call.method == "events.create":
        return [record.call.args[1]]
    if record.call.method == "events.create_batch":
        return list(record.call.args[1])
    return []


def _matches(event: Event, request: EventRequest) -> bool:
    if event.type != request.type or event.correlation_id != request.correlation_id:
        return False
    return all(event.data.get(k) == v for k, v in request.data.items())


def _ids(*records: Record) -> tuple[int, ...]:
    return tuple(sorted({r.index for r in records}))


# -- read invariants -------------------------------------------------------------------


def read_anomalies(records: Sequence[Record]) -> list[Anomaly]:
    """Every broken read invariant of the history (none in a linearizable one)."""
    found: list[Anomaly] = []
    for record, run_id, after, _, page in _pages(records):
        expected = list(range(after + 1, after + 1 + len(page.events)))
        shown = [e.seq for e in page.events]
        if shown != expected or any(e.run_id != run_id for e in page.events):
            found.append(
                Anomaly(
                    name="page with a hole",
                    detail=f"[{record.index}] a page of {run_id} after #{after} shows positions "
                    f"{shown}, not {expected}",
                    records=(record.index,),
                )
            )
            continue
        end = after + len(page.events)
        snap = page.snapshot
        in_band = sum(e.in_band for e in page.events)
        ahead_in_band = after == 0 and snap.seq_in_band > in_band
        if not page.has_more and (snap.seq > end or ahead_in_band):
            counted = f"{snap.seq} events" + (
                f" ({snap.seq_in_band} in-band, the page shows {in_band})" if ahead_in_band else ""
            )
            found.append(
                Anomaly(
                    name="read ahead of its page",
                    detail=f"[{record.index}] the snapshot of {run_id} counts {counted} but "
                    f"the page, which says it is the end (has_more=False), ends at #{end}",
                    records=(record.index,),
                )
            )
    for record in records:
        if record.call.method == "streams.read" and record.ok:
            page_ = record.value
            assert isinstance(page_, ChunkPage)
            indexes = [c.index for c in page_.chunks]
            first = page_.next_index - len(indexes)
            if indexes != list(range(first, page_.next_index)):
                found.append(
                    Anomaly(
                        name="page with a hole",
                        detail=f"[{record.index}] a stream page shows chunks {indexes}",
                        records=(record.index,),
                    )
                )
    found += _stale_reads(records)
    return found


def _stale_reads(records: Sequence[Record]) -> list[Anomaly]:
    """Reads that do not extend what finished before they began."""
    seen: dict[str, list[tuple[Record, Event]]] = defaultdict(list)
    counts: dict[str, list[tuple[Record, int]]] = defaultdict(list)
    for record, events in _accepted(records):
        for event in events:
            seen[event.run_id].append((record, event))
            counts[event.run_id].append((record, event.seq))
    for record, run_id, _, _, page in _pages(records):
        seen[run_id] += [(record, e) for e in page.events]
        counts[run_id].append((record, page.snapshot.seq))
    found: list[Anomaly] = []
    for reader, run_id, after, limit, page in _pages(records):
        shown = {e.seq: e for e in page.events}
        end = after + len(page.events)
        for earlier, event in seen[run_id]:
            if not earlier.precedes(reader) or event.seq <= after:
                continue
            if event.seq in shown and shown[event.seq] != event:
                found.append(
                    Anomaly(
                        name="lost update" if not earlier.call.reads_only else "stale read",
                        detail=f"[{reader.index}] shows {shown[event.seq].label} of {run_id} "
                        f"where [{earlier.index}] (finished before it began) saw {event.label}",
                        records=_ids(earlier, reader),
                    )
                )
                break
            if event.seq not in shown and len(page.events) < limit and event.seq > end:
                found.append(
                    Anomaly(
                        name="stale read",
                        detail=f"[{reader.index}] reads {run_id} up to #{end} "
                        f"(has_more={page.has_more}) but [{earlier.index}], which finished "
                        f"before it began, {'read' if earlier.call.reads_only else 'wrote'} "
                        f"{event.label}",
                        records=_ids(earlier, reader),
                    )
                )
                break
        for earlier, count in counts[run_id]:
            if earlier.precedes(reader) and page.snapshot.seq < count:
                found.append(
                    Anomaly(
                        name="stale read",
                        detail=f"[{reader.index}] sees a snapshot of {run_id} at seq "
                        f"{page.snapshot.seq}, behind the {count} of [{earlier.index}], which "
                        "finished before it began",
                        records=_ids(earlier, reader),
                    )
                )
                break
    return found


# -- naming what the search could not explain ------------------------------------------------


def name_anomaly(records: Sequence[Record]) -> Anomaly | None:
    """The first anomaly recognized in a history, or ``None``.

    Lost writes come first: a read that misses a lost write is its consequence.
    """
    for check in _CHECKS:
        anomaly = check(records)
        if anomaly is not None:
            return anomaly
    return None


def _crash(records: Sequence[Record]) -> Anomaly | None:
    for record in records:
        if record.outcome[0] == "crash":
            return Anomaly(
                name="crash",
                detail=f"[{record.index}] {record.call.render()} raised {record.outcome[1]}",
                records=(record.index,),
            )
    return None


def _reads(records: Sequence[Record]) -> Anomaly | None:
    found = read_anomalies(records)
    return found[0] if found else None


def _positions(records: Sequence[Record]) -> Anomaly | None:
    given: dict[tuple[str, int], Record] = {}
    for record, events in _accepted(records):
        for event in events:
            other = given.setdefault((event.run_id, event.seq), record)
            if other is not record:
                return Anomaly(
                    name="position given twice",
                    detail=f"[{other.index}] and [{record.index}] were both answered with "
                    f"#{event.seq} of {event.run_id}",
                    records=_ids(other, record),
                )
    return None


def _lost(records: Sequence[Record]) -> Anomaly | None:
    logs = _final_logs(records)
    for record, events in _accepted(records):
        for event in events:
            log = logs.get(event.run_id)
            if log is None:
                continue
            there = log[event.seq - 1] if event.seq <= len(log) else None
            if there != event:
                now = there.label if there is not None else "nothing"
                return Anomaly(
                    name="lost update",
                    detail=f"[{record.index}] was answered with {event.label} of {event.run_id}; "
                    f"the final log has {now} there",
                    records=(record.index,),
                )
    return None


def _unaccounted(records: Sequence[Record]) -> dict[str, list[Event]]:
    """Events of the final logs that no accepted write was answered with."""
    accounted = {(e.run_id, e.seq) for _, events in _accepted(records) for e in events}
    return {
        run_id: [e for e in log if (run_id, e.seq) not in accounted]
        for run_id, log in _final_logs(records).items()
    }


def _batches(records: Sequence[Record]) -> Anomaly | None:
    extra = _unaccounted(records)
    for record in records:
        if record.call.method != "events.create_batch" or record.ok:
            continue
        run_id = record.call.args[0]
        landed = [
            e for e in extra.get(run_id, []) if any(_matches(e, r) for r in _requests(record))
        ]
        if landed:
            return Anomaly(
                name="non-atomic batch",
                detail=f"[{record.index}] a batch was refused ({record.outcome[1].__name__}) "
                f"but part of it stayed in the log of {run_id}: "
                + ", ".join(e.label for e in landed),
                records=(record.index,),
            )
    for writer, events in _accepted(records):
        if len(events) < 2:
            continue
        first, last = events[0].seq, events[-1].seq
        if [e.seq for e in events] != list(range(first, first + len(events))):
            return Anomaly(
                name="non-atomic batch",
                detail=f"[{writer.index}] a batch was given positions "
                + ", ".join(f"#{e.seq}" for e in events)
                + ": another write landed in between",
                records=(writer.index,),
            )
        for reader, run_id, after, _, page in _pages(records):
            if run_id != events[0].run_id or reader is writer:
                continue
            end = after + len(page.events)
            partial_page = after < first <= end < last and not page.has_more
            partial_snapshot = first <= page.snapshot.seq < last
            if partial_page or partial_snapshot:
                return Anomaly(
                    name="non-atomic batch",
                    detail=f"[{reader.index}] saw {run_id} end at "
                    f"#{end if partial_page else page.snapshot.seq}, inside the batch "
                    f"#{first}-#{last} of [{writer.index}]",
                    records=_ids(writer, reader),
                )
        for other in records:
            facts = other.outcome[2] if other.outcome[0] == "error" else {}
            seq = facts.get("seq")
            if facts.get("run_id") == events[0].run_id and type(seq) is int and first <= seq < last:
                return Anomaly(
                    name="non-atomic batch",
                    detail=f"[{other.index}] was refused with the log of {facts['run_id']} at "
                    f"#{seq}, inside the batch #{first}-#{last} of [{writer.index}]",
                    records=_ids(writer, other),
                )
    return None


def _refused(records: Sequence[Record]) -> Anomaly | None:
    extra = _unaccounted(records)
    for record in records:
        if record.call.method != "events.create" or record.outcome[0] != "error":
            continue
        run_id = record.call.args[0]
        for event in extra.get(run_id, []):
            if _matches(event, record.call.args[1]):
                return Anomaly(
                    name="refused write that committed",
                    detail=f"[{record.index}] was refused ({record.outcome[1].__name__}) but "
                    f"its event is in the log of {run_id} at {event.label}",
                    records=(record.index,),
                )
    return None


def _terminals(records: Sequence[Record]) -> Anomaly | None:
    for run_id, log in _final_logs(records).items():
        ends = [e for e in log if e.type in RUN_TERMINAL_TYPES]
        if len(ends) > 1:
            return Anomaly(
                name="two terminal events",
                detail=f"run {run_id} has {', '.join(e.label for e in ends)}",
                records=_writers_of(records, ends),
            )
        by_step: dict[str, list[Event]] = defaultdict(list)
        for e in log:
            if e.type in (EventType.STEP_COMPLETED, EventType.STEP_FAILED):
                by_step[e.correlation_id or ""].append(e)
        for step_id, step_ends in by_step.items():
            if len(step_ends) > 1:
                return Anomaly(
                    name="two terminal events",
                    detail=f"step {step_id} of {run_id} has "
                    + ", ".join(e.label for e in step_ends),
                    records=_writers_of(records, step_ends),
                )
    return None


def _writers_of(records: Sequence[Record], events: Sequence[Event]) -> tuple[int, ...]:
    keys = {(e.run_id, e.seq) for e in events}
    return tuple(
        r.index for r, written in _accepted(records) if keys & {(e.run_id, e.seq) for e in written}
    )


def _tokens(records: Sequence[Record]) -> Anomaly | None:
    holders: dict[str, list[str]] = defaultdict(list)
    for run_id, log in _final_logs(records).items():
        for hook in fold_log(log).hooks.values():
            if hook.status is HookStatus.ACTIVE:
                holders[hook.token].append(f"{run_id}/{hook.hook_id}")
    for token, held in holders.items():
        if len(held) > 1:
            creators = tuple(
                r.index
                for r in records
                if any(
                    req.type is EventType.HOOK_CREATED and req.data.get("token") == token
                    for req in _requests(r)
                )
                and r.phase == "concurrent"
            )
            return Anomaly(
                name="duplicate token holder",
                detail=f"token {token!r} is held by {len(held)} live hooks: {', '.join(held)}",
                records=creators,
            )
    return None


def _resumes(records: Sequence[Record]) -> Anomaly | None:
    for run_id, log in _final_logs(records).items():
        first: dict[str, Event] = {}
        for e in log:
            resume_id = e.data.get("resume_id") if e.type is EventType.HOOK_RECEIVED else None
            if resume_id is None:
                continue
            if resume_id in first:
                return Anomaly(
                    name="duplicate resume",
                    detail=f"resume_id {resume_id!r} of {run_id} is at "
                    f"{first[resume_id].label} and again at {e.label}",
                    records=_writers_of(records, [first[resume_id], e]),
                )
            first[resume_id] = e
    return None


def _stream_writes(records: Sequence[Record]) -> list[tuple[Record, str, str, list[bytes], int]]:
    """Accepted stream writes: record, run, name, chunks, first index."""
    found = []
    for record in records:
        if record.call.method == "streams.write" and record.ok:
            run_id, name, chunks = record.call.args[:3]
            batch = [chunks] if isinstance(chunks, bytes) else list(chunks)
            found.append((record, run_id, name, batch, int(record.value) - len(batch) + 1))
    return found


def _streams(records: Sequence[Record]) -> Anomaly | None:
    writes = _stream_writes(records)
    taken: dict[tuple[str, str, int], Record] = {}
    for record, run_id, name, batch, first in writes:
        for index in range(first, first + len(batch)):
            other = taken.setdefault((run_id, name, index), record)
            if other is not record:
                return Anomaly(
                    name="overwritten stream chunk",
                    detail=f"[{other.index}] and [{record.index}] both wrote chunk {index} of "
                    f"stream {name!r} of {run_id}",
                    records=_ids(other, record),
                )
    finals: dict[tuple[str, str], ChunkPage] = {}
    for record in records:
        if record.phase == "final" and record.call.method == "streams.read" and record.ok:
            finals[(record.call.args[0], record.call.args[1])] = record.value
    for record, run_id, name, batch, first in writes:
        final = finals.get((run_id, name))
        if final is None:
            continue
        stored = {c.index: c.data for c in final.chunks}
        for offset, data in enumerate(batch):
            if first + offset in stored and stored[first + offset] != data:
                return Anomaly(
                    name="overwritten stream chunk",
                    detail=f"[{record.index}] wrote {data!r} at {first + offset} of stream "
                    f"{name!r} of {run_id}; the stream holds {stored[first + offset]!r} there",
                    records=(record.index,),
                )
    for (run_id, name), final in finals.items():
        appended = sum(len(b) for _, r, n, b, _ in writes if (r, n) == (run_id, name))
        if len(final.chunks) < appended and not final.has_more:
            return Anomaly(
                name="lost stream chunk",
                detail=f"accepted writes appended {appended} chunks to stream {name!r} of "
                f"{run_id}; it holds {len(final.chunks)}",
                records=tuple(r.index for r, rr, n, _, _ in writes if (rr, n) == (run_id, name)),
            )
    closes = [r for r in records if r.call.method == "streams.close" and r.ok]
    for record, run_id, name, _, _ in writes:
        for close in closes:
            if close.call.args[:2] == (run_id, name) and close.precedes(record):
                return Anomaly(
                    name="write after close",
                    detail=f"[{record.index}] wrote to stream {name!r} of {run_id} after "
                    f"[{close.index}] had closed it",
                    records=_ids(close, record),
                )
    return None


_CHECKS: tuple[Callable[[Sequence[Record]], Anomaly | None], ...] = (
    _crash,
    _lost,
    _positions,
    _reads,
    _batches,
    _refused,
    _terminals,
    _tokens,
    _resumes,
    _streams,
)
