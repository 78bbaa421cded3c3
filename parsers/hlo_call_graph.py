"""Call cycles among a module's computations, found without recursion.

XLA's call graph is acyclic (a computation never calls itself, through a fusion, while body or condition,
call, conditional branch or applied reducer); a dump with a cycle is damaged, and any walk that follows
calls would never end on it. The parser finds the cycles once (Tarjan's strongly connected components,
with an explicit stack: a 100k-deep call chain costs no Python stack) and warns; the walkers skip what
lies on a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["call_cycles"]


def _callees(computations: Mapping) -> dict[str, list[str]]:
    """Each computation's called computations that exist, in order, without repeats."""
    out = {}
    for name, comp in computations.items():
        seen = dict.fromkeys(c for ins in comp.instructions for c in ins.called_computations() if c in computations)
        out[name] = list(seen)
    return out


def _components(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out


def _cycle_through(start: str, members: set[str], graph: dict[str, list[str]]) -> tuple[str, ...]:
    """One shortest cycle from ``start`` back to it inside its component (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in graph[node]:
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return tuple(reversed(path))
                if child in members and child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return (start,)


def call_cycles(computations: Mapping) -> dict[str, str]:
    """Every computation that can reach itself through calls -> one cycle of its group, as text
    (``%fa -> %fb -> %fa``: %fa calls %fb, which calls %fa; ``%fc -> %fc``: %fc calls itself). Every member
    of the group is named, not only those on the cycle shown: a walk must stop at all of them."""
    graph = _callees(computations)
    out: dict[str, str] = {}
    for component in _components(graph):
        if len(component) > 1 or component[0] in graph[component[0]]:
            cycle = _cycle_through(min(component), set(component), graph)
            out.update(dict.fromkeys(sorted(component), " -> ".join(f"%{n}" for n in (*cycle, cycle[0]))))
    return out
