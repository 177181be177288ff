"""Rig specs and model builders, encoder I/O, experiments, synchronization, pipeline, CLI."""
