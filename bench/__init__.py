"""Benchmarks: placement quality on GPU-cluster traces, planner speed, manager overhead (`make bench`).

Run everything with `python -m bench.run [--quick]`; the report is docs/benchmarks.md.
"""
