"""What a run tells about itself: where the time goes (timing), a node's /metrics (prometheus), the
audit of every batch (ledger), and greedy curves compared at equal env steps (curves)."""
