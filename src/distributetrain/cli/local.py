"""Placeholder: commands of this module are registered by `register`."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add this module's commands to the `distributetrain` group."""
