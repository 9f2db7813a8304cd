"""Stand-in DeepEP package: importable, with one extension library."""
