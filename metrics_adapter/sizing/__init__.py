"""The adapter's side of sizing: the cluster watch, kube objects, history ConfigMap, observation.

The sizer itself (``decide`` and its model) is the pure package :mod:`edl_sizing`.
"""
