"""EDL per-pod agent: supervises the trainer, records and exports training metrics."""
