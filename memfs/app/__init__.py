"""The application: the commands (cli), the mount's lifecycle (start, serve, stop, signals,
sd_notify), the bare mountpoint's seal, the systemd user unit, the demo, and what the
commands that run without a mount do (restore and log, adopting an old account).

Contract: the top layer; may import every other layer, pyfuse3 and trio. Nothing imports it
but ``memfs.__main__``.
"""
