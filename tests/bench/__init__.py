"""The memfs benchmark: ``python -m tests.bench.run [--quick] [--out DIR]`` (see run.py)."""
