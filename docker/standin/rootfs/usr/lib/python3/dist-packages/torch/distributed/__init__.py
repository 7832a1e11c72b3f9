"""dlperf stand-in: see torch/distributed/launch.py."""
