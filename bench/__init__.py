"""Benchmarks: placement quality on GPU-cluster traces, planner speed, manager overhead (`make bench`).

Run everything with `python -m bench.run [--quick]`; the report is docs/benchmarks.md. The folders are the
map:

  run.py      the driver: measures the sections asked for, stores them, renders the report
  measure/    what runs something real and times it (one module per section, `main(quick) -> dict`)
  sim/        the placement simulation: model, workload, policies, simulator, experiment, metrics
  store.py    the results directory (bench/results/) between measuring and rendering
  report/     docs/benchmarks.md and the measured blocks of other docs, from stored results only

bench/importlinter.toml holds the layering (`make lint` checks it): measure and report never import each
other, and nothing imports run.
"""
