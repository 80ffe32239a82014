"""Prometheus collectors of the agent: each reads one source through an injectable seam."""
