"""dlperf stand-in package: only ``torchtitan.train`` (see dlperf_standin_llm.py)."""
