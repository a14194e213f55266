"""``python -m memfs``: the same entry point as the ``memfs`` console script.

The systemd unit falls back to this when no ``memfs`` script sits beside the
interpreter (see ``memfs.service.memfs_command``).
"""

from memfs.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
