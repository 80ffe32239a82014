"""Where metric values come from and are kept: sources, the store, windows, the catalogue."""
