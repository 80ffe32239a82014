"""The served API: routing raw paths, the wire shapes, label selectors, the Flask app."""
