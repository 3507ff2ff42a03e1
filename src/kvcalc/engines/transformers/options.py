"""transformers' plugin: its name and summary (``--engine transformers``; no knobs), light enough
for the CLI to read without loading the rules (rules.py)."""

from __future__ import annotations

from kvcalc.engines.knobs import EnginePlugin

PLUGIN = EnginePlugin(
    name="transformers",
    summary="DynamicCache: sliding layers keep W-1",
    rules="kvcalc.engines.transformers.rules:Transformers",
)
