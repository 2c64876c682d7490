"""Exceptions memopt raises on bad input."""

from __future__ import annotations


class ConfigError(ValueError):
    """A memopt setting (argument or environment variable) has a bad value."""


class PlanError(ConfigError):
    """A plan string (``ClusterId:Strategy:Count``) or a plan setting is malformed.

    The message quotes the offending plan and names the bad field. A :class:`ConfigError`, so
    one ``except memopt.ConfigError`` catches every bad setting.
    """


class KeptGraphError(RuntimeError):
    """A backward that keeps the graph (``retain_graph=True``, ``create_graph=True``) reached a
    region whose compiled backward was given the saved tensors to reuse (donated buffers)."""
