"""What the agent and the adapter share: Kubernetes grammars, the option table, `ConfigError`.

The trainer image ships `agent` and the adapter image `metrics_adapter`; neither imports the
other, so the one duration grammar, the one Quantity grammar and the table that turns an
option into a flag, an environment variable and a docs row live here, imported by both.
"""
