"""Enrichment: taxonomy (kinds), segmentation (step/layer/micro-batch), topology, clock alignment.

Pure frame → frame functions; enriching a store on disk is :func:`asaptrace.pipeline.enrich_store`.
"""

from asaptrace.enrich.frames import enrich_frames

__all__ = ["enrich_frames"]
