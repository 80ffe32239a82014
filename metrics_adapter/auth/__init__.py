"""Authentication and authorization of an aggregated API server (DESIGN section 4.2)."""
