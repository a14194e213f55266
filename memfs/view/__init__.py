"""The merged view of the sources: a project's files, heads and history, the catalog of
projects, the plans of every write through the mount.

Contract: imports ``memfs.rules``, ``memfs.disk`` and this layer; never pyfuse3 or trio;
knows nothing of inode numbers or the kernel. Not thread-safe: the adapter's trio thread
owns the loaded projects, and a worker builds a new project nobody else sees yet.
"""
