"""The smoke suite: a real, small BERT-style PyTorch trainer (``train_bert.py``) and a
tiny local-process runner (``local_runner.py``) so the whole pipeline runs on any machine.

Nothing here imports Airflow; ``train_bert.py`` imports torch only when executed.
"""
