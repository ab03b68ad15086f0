"""Enrichment: taxonomy (kinds), segmentation (step/layer/micro-batch), topology, clock alignment.

Pure frame → frame functions; enriching a store on disk is :func:`asaptrace.pipeline.enrich_store`.

Modules, in the order data flows through them: ``taxonomy`` (kinds, from ``rules/*.toml``),
``segment`` (steps, layers, micro-batches from annotations), ``step_links`` (a step counted
once: ``ProfilerStep#N`` of any category, device copies of a step span, Ascend step ids, unlinked
device work by the device's time), ``structure`` and ``comm_layers``
(steps from idle gaps, layers from the dispatch/combine order, where annotations say nothing),
``phases``, ``topology`` (roles, groups), ``instances`` and ``clock`` (matched collectives,
offsets), ``batches``; ``frames`` runs them on a group of ranks (pure). Streaming a store through
them a group at a time: ``streaming`` (the passes), ``early_pass`` (a large rank's first pass as
its file is read), ``host_chunks`` (a big rank's host rows and flows, read in chunks, given their steps
and written back), ``spill_cache`` (frames between rounds), ``store_parts`` (where each rank's
parts are; the writers).
"""

from asaptrace.enrich.frames import enrich_frames

__all__ = ["enrich_frames"]
