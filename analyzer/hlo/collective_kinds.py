"""Which transfer an op performs, from its opcode, trace category or name: the vocabulary of collectives.

A fact about one instruction (no chip, no time): the collective models price these kinds
(``models/collectives.py``), the HLO facts label every op with one.
"""

from __future__ import annotations

import functools
import re

# The vocabulary. KINDS are the collectives the ring model prices; TRANSFER_KINDS add the other transfers a
# step can wait on. Send/recv is its own kind, "send-recv": XLA has distinct send/recv/send-done/recv-done
# opcodes (channel point-to-point, often host transfers or pipelined permutes), not the collective-permute
# opcode; the model prices it like a permute (one hop of V). "host-offload" is a copy-start/copy-done to or
# from host memory (S(5)): PCIe, not the interconnect.
KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
TRANSFER_KINDS = KINDS + ("send-recv", "host-offload")
_ALIASES = {  # opcode bases and spelled names (lower case, '-' for '_') -> kind
    **{k: k for k in KINDS},
    "allgather": "all-gather",
    "reducescatter": "reduce-scatter",
    "all-reduce-scatter": "reduce-scatter",  # TPU 'all-reduce-scatter fusion' is a reduce-scatter
    "allreduce": "all-reduce",
    "alltoall": "all-to-all",
    "ragged-all-to-all": "all-to-all",
    "collective-broadcast": "collective-permute",
    "send": "send-recv",
    "recv": "send-recv",
    "send-recv": "send-recv",
}
# Op names as JAX/XLA/NCCL print them (captures without a dump, custom kernels), searched anywhere in the name.
_NAME_PATTERNS = [
    (re.compile(r"all[-_]?gather", re.I), "all-gather"),
    (re.compile(r"reduce[-_]?scatter", re.I), "reduce-scatter"),
    (re.compile(r"all[-_]?reduce|psum|nccl.*allreduce|rccl.*allreduce", re.I), "all-reduce"),
    (re.compile(r"all[-_]?to[-_]?all", re.I), "all-to-all"),
    (re.compile(r"collective[-_]?permute|ppermute", re.I), "collective-permute"),
]


def _base(text: str, suffixes: str = "start|done|update") -> str:
    """'all-gather-start.3' / 'all-reduce fusion' / 'AllGather' -> 'all-gather' / 'all-reduce' / 'allgather'."""
    return _base_of(str(text), suffixes)


@functools.lru_cache(maxsize=4096)  # a few opcodes and categories, asked once per op
def _base_of(text: str, suffixes: str) -> str:
    k = text.strip().lower().replace("_", "-")
    k = re.sub(r"\.\d+$", "", k)
    k = re.sub(r"[\s-]*fusion$", "", k)
    return re.sub(rf"-({suffixes})$", "", k)


def kind_of(opcode: str | None = None, *, wrapped: str | None = None, category: str | None = None,
            name: str | None = None, to_host: bool = False) -> str | None:
    """The transfer an op performs, one of :data:`TRANSFER_KINDS`, or None.

    Evidence in order of trust: a host transfer (``to_host``: a copy touching host memory), the HLO
    ``opcode`` (``*-start``/``*-done`` stripped; an ``async-start``/``async-done`` wrapper by its
    ``wrapped`` op), the TPU trace ``category`` of collective fusions ('all-reduce fusion'), and only without
    an opcode the op ``name`` (GPU kernels, captures without HLO).
    """
    if to_host:
        return "host-offload"
    if opcode:
        base = _base(opcode, "start|done")  # an async-update is plumbing of its chain, not a transfer
        if base == "async" and wrapped:
            base = _base(wrapped)
        if base in _ALIASES:
            return _ALIASES[base]
    if category and str(category).lower().endswith("fusion"):
        kind = _ALIASES.get(_base(category))
        if kind in KINDS:
            return kind
    if name and not opcode:  # a known opcode that is no transfer is not one because of its name
        for pattern, kind in _NAME_PATTERNS:
            if pattern.search(str(name)):
                return kind
    return None


def normalize_kind(kind: str) -> str:
    """A kind the ring model prices ('all-gather-start', 'AllGather', 'send' ...) -> KINDS or 'send-recv'."""
    k = _ALIASES.get(_base(kind))
    if k is None:
        raise ValueError(f"not a collective kind: {kind!r} (expected one of {', '.join(KINDS)}, send-recv)")
    return k
