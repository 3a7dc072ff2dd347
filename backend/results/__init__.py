"""Each job's ETT answer, kept and served: the recompute pipeline and the job read model.

`recompute` is the top of the write path: it reads a job's raw events, runs the pure engine of
`backend.ett` with the owners mapping's custom phases, stores the answer (`backend.ett.store`)
and refreshes the fleet rollups and the metrics ledger (`backend.fleet`). `read` and `views` serve
the stored answers (`GET /api/v1/jobs...`); `cli` is `ett recompute`.
"""
