"""One-line explanations of the terms a reader may not know, for every report format.

HTML shows them as tooltips (``title`` attributes), Markdown and text as a glossary at the end listing the
terms their report uses (:func:`used_terms`). One place, so the formats explain a term the same way.
"""

from __future__ import annotations

import re

GLOSSARY: dict[str, str] = {
    "MFU": ("model FLOPs utilization: the model's FLOPs per step / (step time x the chips' peak FLOP/s); "
            "large training runs reach 40-60%"),
    "roofline": ("an op's least possible time on this chip: the larger of FLOPs / peak FLOP/s and "
                 "bytes / memory bandwidth; the roofline ideal step is every op at its roofline"),
    "exposed": "time a device waits for a transfer that no other work hides: it adds straight to the step",
    "recoverable": ("step time the fixes together could save: each op's time is counted by one finding only, "
                    "so the savings add up"),
    "counted": ("the part of a finding's saving that enters the recoverable total; an op two findings name "
                "counts in the more specific one"),
    "C/W": ("peak FLOP/s (C) / link bandwidth in bytes/s (W): the FLOPs a device must do per byte it sends "
            "for the transfer to hide behind compute"),
    "ICI": "inter-chip interconnect: the direct links between TPU chips, a 2D or 3D torus",
    "HBM": ("high-bandwidth memory: the accelerator's own memory; its bandwidth bounds memory-bound ops, its "
            "size what the program can keep"),
}
# How each term is spotted in a report's text: whole words; the capitalised acronyms as written.
_PATTERNS = {term: re.compile(rf"(?<![\w/]){re.escape(term)}(?![\w/])", 0 if term.isupper() or "/" in term
                              else re.I) for term in GLOSSARY}


def explain(term: str) -> str:
    """The term's one-line explanation ('' for an unknown term)."""
    return GLOSSARY.get(term, "")


def used_terms(text: str) -> list[tuple[str, str]]:
    """(term, explanation) for each glossary term ``text`` uses, in glossary order."""
    return [(term, GLOSSARY[term]) for term, pattern in _PATTERNS.items() if pattern.search(text)]


def term_in(label: str) -> str:
    """The explanation of the first glossary term a label names ('' when none): the tooltip of a card or row."""
    found = used_terms(label)
    return f"{found[0][0]}: {found[0][1]}" if found else ""
