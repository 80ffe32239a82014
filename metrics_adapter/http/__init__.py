"""The HTTP front end: connections, deadlines and caps, request framing, TLS, the blocking rule."""
