"""memfs: one FUSE mount where every coding agent's per-project memory appears once."""

__version__ = "0.1.0"
