"""The Prometheus exporter: GET /metrics, the GPU-second ledger and the service's own health."""
