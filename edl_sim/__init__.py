"""Offline tools for cluster admins: the HPA model (edl-hpa) and the cluster simulator (edl-sim).

Never imports :mod:`metrics_adapter`; sizing defaults come from :mod:`edl_sizing`.
"""
