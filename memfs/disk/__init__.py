"""Every access to real folders and to the system: reading source folders (no link ever
followed), staging and committing writes (atomic replace, fsync) and running a write plan's
steps, the private state folder, the configuration and the discovery of sources (and which
project each Gemini CLI folder is), what /proc says about callers, the folders kept open for
opens, and inotify (watches and the events queued, never waited for).

Contract: imports only ``memfs.rules`` and this layer; never pyfuse3 or trio. Its calls
block (they do I/O): while serving, the adapter runs the slow ones in worker threads; the
view uses only its values (a plan's steps, a scan's results, constants, pure helpers) and
calls none of its I/O. Writes only in the own source and the state folder.
"""
