"""Report rendering: docs/benchmarks.md (document, one module per section, goals, headline, plots) and the
measured blocks of docs/planner.md and docs/manager.md (docblocks), all from the stored results, so
`python -m bench.run --render-only` re-renders without measuring. It reads results; it never measures."""
