"""Policies: pure rules that decide (adaptive trial counts, the scheduler's packing, node-health verdicts)."""
