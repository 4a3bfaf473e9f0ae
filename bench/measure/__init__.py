"""Measuring: each bench that times or runs something real (the planner, the local API server, the manager, a
demo job, Horovod over node links, a lost worker) is a module here whose `main(quick) -> dict` bench/run.py
calls, and most run alone too (`python -m bench.measure.NAME`). They return JSON-ready results and render
nothing: bench/report turns the stored results into Markdown."""
