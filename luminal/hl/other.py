"""Scans, masks, and debugging ops."""

from __future__ import annotations


class OtherOps:
    pass
