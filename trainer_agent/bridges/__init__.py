"""Bridges from other training-telemetry libraries to the agent (standard library only).

Each bridge imports its peer library lazily, if at all: `trainer_agent.bridges.goodput` needs
nothing from ml-goodput-measurement to be imported.
"""
