"""Command-line tails that several test modules pass to kvcalc."""

from __future__ import annotations

FIT = ("--gpu", "h100")
