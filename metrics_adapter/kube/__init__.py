"""The Kubernetes plumbing every room stands on.

The API client, the list/watch reflector, label selectors and name grammars. It imports
nothing of the adapter's rooms.
"""
