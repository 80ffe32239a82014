"""Durable checkpoints of an elastic job: what survives when every pod of the job is gone.

`store` is the extension point (a `CheckpointStore` Protocol and a registry by URL scheme;
`local` is the directory backend that ships, for a ReadWriteMany PersistentVolumeClaim),
`catalogue` the one job's checkpoints in a store (manifests, checksums, fallback, pruning),
`settings` the flags and variables, `stats` the metrics report the agent exports. Nothing
here imports a training framework: the agent reads the catalogue too (a finished job is
never resumed), and the trainer side (`agent.trainer.checkpointer`) adds the writer thread.
"""
