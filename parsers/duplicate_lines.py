"""A trace line whose events repeat an earlier line's of the same plane byte for byte (damage, or a broken
exporter): counted twice, its time would pass the step, so the reader keeps the first one only."""

from __future__ import annotations


def repeats_a_line(line, seen: dict) -> bool:
    """Whether the line's events are byte for byte an earlier line's of the plane (damage, or a broken exporter:
    counted twice, its time would pass the step); compared in full only when timebase, count, ends agree."""
    events = line.events
    key = (line.timestamp_ns, len(events), events[0], events[-1])
    earlier = seen.setdefault(key, [])
    if any(list(other.events) == list(events) for other in earlier):
        return True
    earlier.append(line)
    return False
