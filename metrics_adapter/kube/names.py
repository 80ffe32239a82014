"""Kubernetes name grammars (``k8s.io/apimachinery/pkg/util/validation``).

One place for the regular expressions every room checks names with: a path's namespace and
object name (the router), a static pod list's names, a label selector's key prefix and
qualified names.
"""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""A namespace's name (RFC 1123 label: at most 63 characters, checked by the caller)."""
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""Most objects' names, and a label key's prefix (at most 253 characters)."""
QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
"""A label key's name part and a label value (at most 63 characters)."""
