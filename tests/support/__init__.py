"""Helpers shared by the test layers (not tests, not conftest): waits, PKI, renders, jobs."""
