"""``python -m memfs``: the same entry point as the ``memfs`` console script.

The background daemon of ``memfs mount`` runs through this (``mount.daemon_command``),
and so does the systemd unit when no ``memfs`` script sits beside the interpreter
(``service.memfs_command``); both pass ``-P``, because plain ``-m`` would import an
empty ``memfs/`` folder in the current folder (the default mountpoint, in the home)
instead of this package.
"""

from memfs.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
