"""Simulation: the placement experiment on GPU-cluster traces. The numbers it rests on (model), the traces and
clusters (workload), the policies compared (policies), the discrete-event simulator (simulator), the runs in
parallel (experiment), what a run is worth (metrics, agreement), and the span cost calibrated from the
throughput bench's measurements (span_calibration). Pure: no cluster, no files."""
