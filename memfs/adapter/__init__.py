"""The FUSE filesystem: pyfuse3's handlers, what the kernel may cache and telling it what
to forget, open files and inode numbers, the inotify watcher, the worker threads.

Contract: the only layer below ``memfs.app`` that may import pyfuse3 and trio; imports
``rules``, ``disk``, ``view`` and itself. Its handlers translate (decode, ask the view,
answer or raise an errno) and run nothing slow on the request thread (§7a).
"""
