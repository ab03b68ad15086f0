"""Enrichment: taxonomy (kinds), segmentation (step/layer/micro-batch), topology, clock alignment."""

from asaptrace.enrich.pipeline import enrich_frames, enrich_store

__all__ = ["enrich_frames", "enrich_store"]
