"""Measurement: from a trial's log to checked numbers (log names, extraction, validity, statistics, steadiness, stragglers)."""
