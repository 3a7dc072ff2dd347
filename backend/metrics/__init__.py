"""The metrics layer: every aggregate the product shows is computed here (docs/METRICS.md).

`core` is pure arithmetic (GPU weighting, ETT%, GPU-hours, lost-by, failure rates, series with
partial buckets); `reads` holds the database reads it is fed from; `fleet`, `workloads` and
`window` answer the questions of the REST views, the dashboard, the alert indicators and the
/metrics ledger. Outside it, only the engine (one job's own accounting) and the planner's model
(expected, not measured, numbers) multiply by `gpus` or divide by 3600.
"""
