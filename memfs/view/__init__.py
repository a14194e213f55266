"""The merged view of the sources: a project's files, heads and history, the catalog of
projects, the plans of every write through the mount.

Contract: imports ``memfs.rules``, ``memfs.disk`` and this layer; never pyfuse3 or trio;
knows nothing of inode numbers or the kernel. Does no I/O: it uses the disk layer's values
(a plan's steps, a scan, a listing, what the state folder keeps, constants, pure helpers),
never calls its I/O; what the disk holds comes from its caller, and its plans name the disk
work a worker does (tests/test_layers.py holds it). Not thread-safe: the adapter's trio
thread owns the loaded projects, and a worker builds a new project nobody else sees yet.
"""
