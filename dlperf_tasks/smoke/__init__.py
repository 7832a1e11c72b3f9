"""The smoke suite: a real, small BERT-style PyTorch trainer (``train_bert.py``), run as worker
processes on this machine by the local runtime (``dlperf_tasks.remote.local``), so the whole
pipeline runs on any machine. ``train_bert.py`` imports torch only when executed.
"""
