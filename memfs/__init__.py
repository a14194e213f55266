"""memfs: one FUSE mount where every coding agent's per-project memory appears once, merged.

The package is five layers, each a subpackage; a layer imports only the layers below it
(tests/test_layers.py checks every module's imports):

- ``rules``: pure rules of the problem (slugs, names that are not memory, view paths,
  history names, the MEMORY.md union, PREAMBLE.md's rendering). No I/O, no threads.
- ``disk``: every access to real folders and to the system (source folders, staging and
  committing writes, the state folder, the configuration and its discovery, /proc).
- ``view``: the merged view of the sources (projects, the catalog of projects, write
  plans). Memory only: it is given what the disk holds and plans what the disk layer does.
- ``adapter``: the FUSE filesystem (pyfuse3 and trio): handlers, what the kernel may cache,
  open files and inode numbers, the watcher, worker threads.
- ``app``: the commands (restore, log and adopt among them, which run without a mount),
  the mount's lifecycle, the service unit, the demo.

pyfuse3 and trio are imported only by ``adapter`` and ``app``. §N in comments cites the
behaviour contract, docs/BEHAVIOUR.md.
"""

__version__ = "0.1.0"
