"""One HTTP/1.1 front end for every EDL server: the agent's exporter and the metrics adapter.

h11 parses and frames; this package adds what a server facing hostile clients needs and h11
leaves to its user: deadlines, connection caps with eviction, strict refusals of ambiguous
heads, and the request-target forms of RFC 9112. It is framework-free (no WSGI, no Flask) so
the agent, which may import only ``edl_common``, serves through the same code as the adapter.
"""
