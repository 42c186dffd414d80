"""Data you can trust: what is measured of each stored image and pair (`measures`, kept as index columns or beside
the index: `facts`), and the audits that compare them across splits and packs (`run.audit`, `pairload audit`;
`overlap.refuse_overlap`, the check before training). `packing` holds what `pairload pack` concludes from them."""

from __future__ import annotations

__all__ = ["AuditReport", "audit", "refuse_overlap"]


def __getattr__(name: str):
    # lazy: packing imports `measures` alone, in every worker process
    if name == "audit":
        from .run import audit

        return audit
    if name == "AuditReport":
        from .findings import AuditReport

        return AuditReport
    if name == "refuse_overlap":
        from .overlap import refuse_overlap

        return refuse_overlap
    raise AttributeError(f"module 'pairload.audit' has no attribute {name!r}")
