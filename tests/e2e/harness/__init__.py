"""Test harness for the e2e layer: a real control plane on loopback, a pod runner, the adapter."""
