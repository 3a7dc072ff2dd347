"""The metrics layer: every aggregate the product shows is computed here (docs/METRICS.md).

`core` is pure arithmetic (GPU weighting, ETT%, GPU-hours, lost-by, failure rates, series with
partial buckets); `reads` holds the database reads it is fed from; `fleet`, `workloads` and
`window` answer the questions of the REST views, the dashboard, the alert indicators and the
/metrics ledger. No other module divides by 3600 or multiplies by `gpus`.
"""
